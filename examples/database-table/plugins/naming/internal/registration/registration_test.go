package registration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cnpgi-rs/cnpgi-rs/examples/database-table/plugins/naming/internal/registrationpb"
)

const plugin = "naming.tables.example.cnpgi.io"

// fast is the loop's timing scaled down for tests.
var fast = Timing{
	RegisterDeadline:  2 * time.Second,
	HeartbeatDeadline: time.Second,
	FirstRetry:        20 * time.Millisecond,
	MaxRegisterRetry:  80 * time.Millisecond,
}

// pki writes a CA and leaves it signs into a temporary directory.
type pki struct {
	t    *testing.T
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newPKI(t *testing.T) *pki {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{t: t, dir: t.TempDir(), cert: cert, key: key}
	p.write("ca.crt", "CERTIFICATE", der)
	return p
}

func (p *pki) write(name, kind string, der []byte) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// leaf writes a certificate for names (DNS names, or IPs) and its key.
func (p *pki) leaf(stem string, usage x509.ExtKeyUsage, names ...string) (string, string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, name := range names {
		if ip := net.ParseIP(name); ip != nil {
			template.IPAddresses = append(template.IPAddresses, ip)
		} else {
			template.DNSNames = append(template.DNSNames, name)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, template, p.cert, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.write(stem+".crt", "CERTIFICATE", der), p.write(stem+".key", "PRIVATE KEY", keyDER)
}

// operator is a Registration service recording what it was asked: it
// refuses the first refusals Registers, answers NOT_FOUND to the heartbeats
// of the first lease, and checks the client certificate names the plugin
// over TLS 1.3, as the cnpgi-rs host does.
type operator struct {
	registrationpb.UnimplementedRegistrationServer

	mu         sync.Mutex
	refusals   int
	registers  []*registrationpb.RegisterRequest
	heartbeats []string
	notes      []string
}

func (o *operator) authorize(ctx context.Context, name string) error {
	p, _ := peer.FromContext(ctx)
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return status.Error(codes.Unauthenticated, "no client certificate")
	}
	if info.State.Version != tls.VersionTLS13 {
		o.notes = append(o.notes, fmt.Sprintf("TLS version %x", info.State.Version))
	}
	for _, dns := range info.State.PeerCertificates[0].DNSNames {
		if dns == name {
			return nil
		}
	}
	return status.Errorf(codes.PermissionDenied, "the client certificate does not name plugin %s", name)
}

func (o *operator) Register(
	ctx context.Context,
	request *registrationpb.RegisterRequest,
) (*registrationpb.RegisterResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.authorize(ctx, request.GetName()); err != nil {
		return nil, err
	}
	o.registers = append(o.registers, request)
	if len(o.registers) <= o.refusals {
		return nil, status.Error(codes.Unavailable, "starting")
	}
	lease := fmt.Sprintf("lease-%d", len(o.registers))
	return &registrationpb.RegisterResponse{LeaseId: lease, TtlSeconds: 3, HeartbeatIntervalSeconds: 1}, nil
}

func (o *operator) Heartbeat(
	ctx context.Context,
	request *registrationpb.HeartbeatRequest,
) (*registrationpb.HeartbeatResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.authorize(ctx, request.GetName()); err != nil {
		return nil, err
	}
	o.heartbeats = append(o.heartbeats, request.GetLeaseId())
	if request.GetLeaseId() != fmt.Sprintf("lease-%d", len(o.registers)) || len(o.registers) == o.refusals+1 {
		return nil, status.Error(codes.NotFound, "unknown lease")
	}
	return &registrationpb.HeartbeatResponse{TtlSeconds: 3}, nil
}

func (o *operator) snapshot() (registers []*registrationpb.RegisterRequest, heartbeats, notes []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append(registers, o.registers...), append(heartbeats, o.heartbeats...), append(notes, o.notes...)
}

// serve starts the operator's endpoint with mutual TLS on 127.0.0.1.
func serve(t *testing.T, p *pki, o *operator) string {
	certFile, keyFile := p.leaf("endpoint", x509.ExtKeyUsageServerAuth, "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AddCert(p.cert)
	server := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    clients,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	})))
	registrationpb.RegisterRegistrationServer(server, o)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

func run(t *testing.T, target Target, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return KeepRegistered(ctx, logr.Discard(), target, plugin, "0.1.0", fast)
}

func TestRegistersHeartbeatsAndRegistersAgainOnNotFound(t *testing.T) {
	p := newPKI(t)
	o := &operator{refusals: 2}
	endpoint := serve(t, p, o)
	cert, key := p.leaf("plugin", x509.ExtKeyUsageClientAuth, plugin)
	target := Target{Endpoint: endpoint, CA: filepath.Join(p.dir, "ca.crt"), Cert: cert, Key: key, Advertise: "10.0.0.7:9090"}

	// 2 refusals (retried), a lease whose first heartbeat is NOT_FOUND,
	// then a lease kept by heartbeats a second apart.
	if err := run(t, target, 3500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the loop stopped on its own: %v", err)
	}
	registers, heartbeats, notes := o.snapshot()
	if len(notes) != 0 {
		t.Errorf("not over TLS 1.3: %v", notes)
	}
	if len(registers) != 4 {
		t.Fatalf("%d Register calls, want 4 (2 refused, 1 lease lost, 1 kept): %v", len(registers), registers)
	}
	for _, r := range registers {
		if r.GetName() != plugin || r.GetVersion() != "0.1.0" || r.GetAddress() != "10.0.0.7:9090" {
			t.Errorf("registered %v", r)
		}
	}
	if len(heartbeats) < 2 || heartbeats[0] != "lease-3" || heartbeats[1] != "lease-4" {
		t.Errorf("heartbeats %v: want lease-3 (refused), then lease-4", heartbeats)
	}
}

func TestACertificateNamingAnotherPluginIsRefusedAndRetried(t *testing.T) {
	p := newPKI(t)
	o := &operator{}
	endpoint := serve(t, p, o)
	cert, key := p.leaf("other", x509.ExtKeyUsageClientAuth, "other.example.com")
	target := Target{Endpoint: endpoint, CA: filepath.Join(p.dir, "ca.crt"), Cert: cert, Key: key, Advertise: "127.0.0.1:9090"}
	if err := run(t, target, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the loop stopped on its own: %v", err)
	}
	if registers, _, _ := o.snapshot(); len(registers) != 0 {
		t.Errorf("registered with a certificate for another plugin: %v", registers)
	}
}

func TestAnOperatorNotTrustedIsNotRegisteredWith(t *testing.T) {
	trusted, untrusted := newPKI(t), newPKI(t)
	o := &operator{}
	endpoint := serve(t, untrusted, o)
	cert, key := trusted.leaf("plugin", x509.ExtKeyUsageClientAuth, plugin)
	target := Target{Endpoint: endpoint, CA: filepath.Join(trusted.dir, "ca.crt"), Cert: cert, Key: key, Advertise: "127.0.0.1:9090"}
	if err := run(t, target, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the loop stopped on its own: %v", err)
	}
	if registers, _, _ := o.snapshot(); len(registers) != 0 {
		t.Errorf("registered with an operator whose certificate is not trusted: %v", registers)
	}
}

func TestAnUnusableConfigurationStopsTheLoop(t *testing.T) {
	p := newPKI(t)
	cert, key := p.leaf("plugin", x509.ExtKeyUsageClientAuth, plugin)
	ca := filepath.Join(p.dir, "ca.crt")
	for _, c := range []struct {
		target Target
		says   string
	}{
		{Target{Endpoint: "operator", CA: ca, Cert: cert, Key: key}, `"operator": expected the operator's registration endpoint as host:port`},
		{Target{Endpoint: "127.0.0.1:1", CA: filepath.Join(p.dir, "none"), Cert: cert, Key: key}, "--registration-ca"},
		{Target{Endpoint: "127.0.0.1:1", CA: cert + "x", Cert: cert, Key: key}, "no such file"},
		{Target{Endpoint: "127.0.0.1:1", CA: key, Cert: cert, Key: key}, "no PEM certificate"},
		{Target{Endpoint: "127.0.0.1:1", CA: ca, Cert: cert, Key: ca}, "registration client certificate"},
	} {
		err := run(t, c.target, 5*time.Second)
		if !errors.Is(err, ErrConfiguration) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want an error saying %q", c.target, err, c.says)
		}
	}
}
