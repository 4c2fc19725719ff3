# shellcheck shell=bash
# Certificates for the test suites, made with openssl. Sourced. Each function
# writes DIR/NAME.key and DIR/NAME.crt, returns non-zero naming what failed
# on stderr, and leaves no request or extension file behind.
#
#   pki_ca DIR NAME SUBJECT [DAYS]
#       a self-signed CA (basicConstraints CA:TRUE, keyCertSign, cRLSign)
#   pki_leaf DIR NAME SUBJECT SAN USAGE [CA] [DAYS]
#       a leaf (CA:FALSE, digitalSignature and keyEncipherment) for USAGE
#       (serverAuth, clientAuth or both, comma-separated) with the
#       subjectAltName SAN ("" for none, e.g. "DNS:plugin,IP:127.0.0.1"):
#       self-signed, as cert-manager's selfSigned issuer makes them, or signed
#       by DIR/CA.crt when CA is given
#   pki_signing_key DIR NAME
#       an RSA key pair, DIR/NAME.key and DIR/NAME.pub (ServiceAccount tokens)
#
# Keys are EC P-256 (as cert-manager's default ECDSA), DAYS defaults to 2.

pki_ca() {
  local dir=$1 name=$2 subject=$3 days=${4:-2}
  openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$dir/$name.key" -out "$dir/$name.crt" -days "$days" -subj "$subject" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null ||
    { echo "pki: openssl cannot make the CA $name ($subject)" >&2; return 1; }
}

pki_leaf() {
  local dir=$1 name=$2 subject=$3 san=$4 usage=$5 ca=${6:-} days=${7:-2}
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' \
    "$usage" "${san:+subjectAltName=$san}" >"$dir/$name.ext"
  if ! openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/$name.key" \
    -subj "$subject" -out "$dir/$name.csr" 2>/dev/null; then
    echo "pki: openssl cannot make the key and request of $name ($subject)" >&2
    return 1
  fi
  local signer=(-signkey "$dir/$name.key")
  [ -z "$ca" ] || signer=(-CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" -CAcreateserial)
  if ! openssl x509 -req -in "$dir/$name.csr" "${signer[@]}" -days "$days" -sha256 \
    -extfile "$dir/$name.ext" -out "$dir/$name.crt" 2>/dev/null; then
    echo "pki: openssl cannot sign the certificate $name${ca:+ with $ca}" >&2
    return 1
  fi
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

pki_signing_key() {
  local dir=$1 name=$2
  if ! openssl genrsa -out "$dir/$name.key" 2048 2>/dev/null ||
    ! openssl rsa -in "$dir/$name.key" -pubout -out "$dir/$name.pub" 2>/dev/null; then
    echo "pki: openssl cannot make the signing key $name" >&2
    return 1
  fi
}
