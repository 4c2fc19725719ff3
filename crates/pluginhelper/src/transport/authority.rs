//! Lets every gRPC client reach a plugin over a Unix socket, whatever
//! `:authority` it sends.
//!
//! Over a Unix socket, grpc-go sends `:authority: localhost`, but grpcio
//! (Python), grpc-java and grpcurl send the socket path, raw or
//! percent-encoded, which is not a URI authority. The h2 crate under tonic
//! answers such a request with `RST_STREAM PROTOCOL_ERROR` and has no option
//! to accept it (hyperium/h2#487).
//!
//! [`AuthorityRewrite`] sits between the Unix stream and the HTTP/2 server
//! and reads what the client sends. It decodes the client's first header
//! block: when its `:authority` is a valid URI authority (or absent), the
//! connection is handed through untouched from then on, at no further cost.
//! Otherwise every header block of that connection is decoded with the
//! client's HPACK context and re-encoded, with `:authority: localhost`, in an
//! HPACK context shared only with the server. Everything else (the preface,
//! DATA, SETTINGS, PING, ...) passes as it is, and the server-to-client
//! direction is never touched.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// Every HTTP/2 peer accepts frames of this size (the protocol's minimum
/// `SETTINGS_MAX_FRAME_SIZE`), so re-encoded blocks are split at it.
const MAX_OUT_FRAME: usize = 16_384;
/// Largest frame or header block accepted from the client. Larger ones are
/// refused here rather than buffered (h2's own limits are lower).
const MAX_IN: usize = 1 << 20;
/// What a non-URI authority is replaced with.
const LOCALHOST: &[u8] = b"localhost";

/// A Unix stream whose requests reach the server with a valid `:authority`
/// (see the [module documentation](self)).
#[derive(Debug)]
pub(crate) struct AuthorityRewrite<S> {
    inner: S,
    state: State,
    /// Bytes read from the client and not processed yet.
    input: Vec<u8>,
    /// Processed bytes for the server, from `output_at` on.
    output: Vec<u8>,
    output_at: usize,
    eof: bool,
}

enum State {
    /// Waiting for the client preface.
    Preface,
    /// Holding the frames of the first header block until it is complete.
    Inspect {
        decoder: Decoder<'static>,
        block: Block,
        held: Vec<u8>,
    },
    /// Re-encoding every header block of the connection.
    Rewrite {
        decoder: Decoder<'static>,
        encoder: Encoder<'static>,
        block: Block,
    },
    /// Handing bytes through untouched.
    Passthrough,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Preface => "Preface",
            Self::Inspect { .. } => "Inspect",
            Self::Rewrite { .. } => "Rewrite",
            Self::Passthrough => "Passthrough",
        })
    }
}

/// A header block being collected from HEADERS and CONTINUATION frames.
#[derive(Default)]
struct Block {
    /// The stream, flags and priority fields of its HEADERS frame, once seen.
    open: Option<BlockStart>,
    fragment: Vec<u8>,
}

#[derive(Clone, Copy)]
struct BlockStart {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
}

fn protocol_error(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

impl<S> AuthorityRewrite<S> {
    /// Wraps the server side of a freshly accepted connection.
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            state: State::Preface,
            input: Vec::new(),
            output: Vec::new(),
            output_at: 0,
            eof: false,
        }
    }

    /// Whether requests of this connection are being re-encoded (known once
    /// the first header block has arrived).
    #[cfg(test)]
    fn is_rewriting(&self) -> bool {
        matches!(self.state, State::Rewrite { .. })
    }

    /// Moves what can be processed from `input` to `output`.
    fn process(&mut self) -> io::Result<()> {
        loop {
            match &mut self.state {
                State::Passthrough => {
                    self.output.append(&mut self.input);
                    return Ok(());
                }
                State::Preface => {
                    if self.input.len() < PREFACE.len() {
                        return Ok(());
                    }
                    if self.input.starts_with(PREFACE) {
                        self.output.extend(self.input.drain(..PREFACE.len()));
                        self.state = State::Inspect {
                            decoder: Decoder::new(),
                            block: Block::default(),
                            held: Vec::new(),
                        };
                    } else {
                        // Not HTTP/2 with prior knowledge: the server refuses it.
                        self.state = State::Passthrough;
                    }
                }
                State::Inspect { .. } | State::Rewrite { .. } => {
                    if self.input.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let length =
                        usize::from(self.input[0]) << 16 | usize::from(self.input[1]) << 8 | usize::from(self.input[2]);
                    if length > MAX_IN {
                        return Err(protocol_error(format!(
                            "HTTP/2 frame of {length} bytes from the client exceeds {MAX_IN}"
                        )));
                    }
                    if self.input.len() < FRAME_HEADER_LEN + length {
                        return Ok(());
                    }
                    let frame: Vec<u8> = self.input.drain(..FRAME_HEADER_LEN + length).collect();
                    self.frame(frame)?;
                }
            }
        }
    }

    /// Handles one complete frame in the Inspect or Rewrite state.
    fn frame(&mut self, frame: Vec<u8>) -> io::Result<()> {
        let kind = frame[3];
        let flags = frame[4];
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let payload = &frame[FRAME_HEADER_LEN..];
        let (block, held) = match &mut self.state {
            State::Inspect { block, held, .. } => (block, Some(held)),
            State::Rewrite { block, .. } => (block, None),
            // Only called in the two states above; anything else passes.
            State::Preface | State::Passthrough => {
                self.output.extend_from_slice(&frame);
                return Ok(());
            }
        };
        let in_block = block.open.is_some();
        let fragment = match (kind, in_block) {
            (HEADERS, false) => {
                let (start, fragment) = headers_fragment(stream, flags, payload)?;
                block.open = Some(start);
                fragment
            }
            (CONTINUATION, true) if block.open.is_some_and(|b| b.stream == stream) => payload,
            (_, true) => {
                return Err(protocol_error(
                    "HTTP/2 header block interrupted by another frame (expected CONTINUATION)",
                ));
            }
            (_, false) => {
                // Not part of a header block: handed on as it is. In the
                // Inspect state it must not overtake held frames, and cannot:
                // held frames exist only while a block is open.
                self.output.extend_from_slice(&frame);
                return Ok(());
            }
        };
        if block.fragment.len() + fragment.len() > MAX_IN {
            return Err(protocol_error(format!(
                "HTTP/2 header block from the client exceeds {MAX_IN} bytes"
            )));
        }
        block.fragment.extend_from_slice(fragment);
        if let Some(held) = held {
            held.extend_from_slice(&frame);
        }
        if flags & END_HEADERS != 0 {
            self.finish_block()?;
        }
        Ok(())
    }

    /// A complete header block: decide (Inspect) or re-encode (Rewrite).
    fn finish_block(&mut self) -> io::Result<()> {
        let state = std::mem::replace(&mut self.state, State::Passthrough);
        match state {
            State::Inspect {
                mut decoder,
                block,
                held,
            } => {
                let Some(start) = block.open else { return Ok(()) };
                match decoder.decode(&block.fragment) {
                    Ok(headers) if headers.iter().any(|(name, value)| is_bad_authority(name, value)) => {
                        let mut encoder = Encoder::new();
                        self.emit(&mut encoder, start, headers);
                        self.state = State::Rewrite {
                            decoder,
                            encoder,
                            block: Block::default(),
                        };
                    }
                    // A valid authority, or a block the server will refuse
                    // itself: hand the connection through as it is.
                    _ => self.output.extend_from_slice(&held),
                }
            }
            State::Rewrite {
                mut decoder,
                mut encoder,
                block,
            } => {
                let Some(start) = block.open else { return Ok(()) };
                let headers = decoder.decode(&block.fragment).map_err(|e| {
                    protocol_error(format!("cannot decode an HTTP/2 header block from the client: {e}"))
                })?;
                self.emit(&mut encoder, start, headers);
                self.state = State::Rewrite {
                    decoder,
                    encoder,
                    block: Block::default(),
                };
            }
            other => self.state = other,
        }
        Ok(())
    }

    /// Writes `headers`, with a valid authority, as HEADERS + CONTINUATION frames.
    fn emit(&mut self, encoder: &mut Encoder<'static>, start: BlockStart, mut headers: Vec<(Vec<u8>, Vec<u8>)>) {
        for (name, value) in &mut headers {
            if is_bad_authority(name, value) {
                *value = LOCALHOST.to_vec();
            }
        }
        let encoded = encoder.encode(headers.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let priority = start.priority.as_ref().map_or(&[][..], |p| &p[..]);
        let first_room = MAX_OUT_FRAME - priority.len();
        let (first, rest) = encoded.split_at(encoded.len().min(first_room));
        let mut chunks = rest.chunks(MAX_OUT_FRAME).peekable();
        let mut flags = if start.end_stream { END_STREAM } else { 0 };
        if start.priority.is_some() {
            flags |= PRIORITY;
        }
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        self.write_frame(HEADERS, flags, start.stream, &[priority, first]);
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() { END_HEADERS } else { 0 };
            self.write_frame(CONTINUATION, flags, start.stream, &[chunk]);
        }
    }

    fn write_frame(&mut self, kind: u8, flags: u8, stream: u32, parts: &[&[u8]]) {
        let length: usize = parts.iter().map(|p| p.len()).sum();
        // `length` ≤ MAX_OUT_FRAME, so it fits the 24-bit field.
        let length = u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes();
        self.output.extend_from_slice(&length[1..]);
        self.output.push(kind);
        self.output.push(flags);
        self.output.extend_from_slice(&stream.to_be_bytes());
        for part in parts {
            self.output.extend_from_slice(part);
        }
    }
}

/// The header block fragment of a HEADERS frame, without padding and
/// priority fields (which are kept apart).
fn headers_fragment(stream: u32, flags: u8, payload: &[u8]) -> io::Result<(BlockStart, &[u8])> {
    let malformed = || protocol_error("malformed HTTP/2 HEADERS frame from the client");
    let mut body = payload;
    let mut pad = 0;
    if flags & PADDED != 0 {
        let (&length, rest) = body.split_first().ok_or_else(malformed)?;
        pad = usize::from(length);
        body = rest;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        let fields: [u8; 5] = body.get(..5).and_then(|f| f.try_into().ok()).ok_or_else(malformed)?;
        priority = Some(fields);
        body = &body[5..];
    }
    let fragment = body
        .get(..body.len().checked_sub(pad).ok_or_else(malformed)?)
        .ok_or_else(malformed)?;
    let start = BlockStart {
        stream,
        end_stream: flags & END_STREAM != 0,
        priority,
    };
    Ok((start, fragment))
}

/// An `:authority` the h2 crate would refuse.
fn is_bad_authority(name: &[u8], value: &[u8]) -> bool {
    name == b":authority" && http::uri::Authority::try_from(value).is_err()
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityRewrite<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.output_at < this.output.len() {
                let ready = &this.output[this.output_at..];
                let n = ready.len().min(buf.remaining());
                buf.put_slice(&ready[..n]);
                this.output_at += n;
                if this.output_at == this.output.len() {
                    this.output.clear();
                    this.output_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if matches!(this.state, State::Passthrough) && this.input.is_empty() {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            if this.eof {
                // An incomplete frame at the end: the server sees what came.
                this.output.append(&mut this.input);
                if this.output.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                this.eof = true;
                continue;
            }
            this.input.extend_from_slice(read.filled());
            this.process()?;
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityRewrite<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: Connected> Connected for AuthorityRewrite<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// What a client sends: the preface, a SETTINGS frame, then one header
    /// block per request, each encoded with the client's HPACK context.
    fn client_bytes(
        encoder: &mut Encoder<'static>,
        requests: &[&[(&[u8], &[u8])]],
        split_at: Option<usize>,
    ) -> Vec<u8> {
        let mut out = PREFACE.to_vec();
        out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // empty SETTINGS
        for (i, headers) in requests.iter().enumerate() {
            let stream = u32::try_from(2 * i + 1).unwrap();
            let block = encoder.encode(headers.iter().copied());
            let (first, rest) = block.split_at(split_at.unwrap_or(block.len()).min(block.len()));
            let mut frame = |kind: u8, flags: u8, body: &[u8]| {
                let len = u32::try_from(body.len()).unwrap().to_be_bytes();
                out.extend_from_slice(&len[1..]);
                out.extend_from_slice(&[kind, flags]);
                out.extend_from_slice(&stream.to_be_bytes());
                out.extend_from_slice(body);
            };
            if rest.is_empty() {
                frame(HEADERS, END_HEADERS, first);
            } else {
                frame(HEADERS, 0, first);
                frame(CONTINUATION, END_HEADERS, rest);
            }
            frame(0x0, END_STREAM, b"\0\0\0\0\0"); // an empty gRPC message
        }
        out
    }

    /// The header lists the server decodes from what the rewriter hands it.
    async fn server_sees(client: Vec<u8>) -> (Vec<Vec<(Vec<u8>, Vec<u8>)>>, Vec<u8>, bool) {
        let (mut near, far) = tokio::io::duplex(1 << 16);
        let mut rewrite = AuthorityRewrite::new(far);
        near.write_all(&client).await.unwrap();
        near.shutdown().await.unwrap();
        let mut seen = Vec::new();
        rewrite.read_to_end(&mut seen).await.unwrap();
        let mut decoder = Decoder::new();
        let mut blocks = Vec::new();
        let mut rest = seen.strip_prefix(PREFACE).unwrap();
        let mut fragment = Vec::new();
        while rest.len() >= FRAME_HEADER_LEN {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let (kind, flags) = (rest[3], rest[4]);
            let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
            if kind == HEADERS {
                let (_, f) = headers_fragment(1, flags, payload).unwrap();
                fragment.extend_from_slice(f);
            } else if kind == CONTINUATION {
                fragment.extend_from_slice(payload);
            }
            if (kind == HEADERS || kind == CONTINUATION) && flags & END_HEADERS != 0 {
                blocks.push(decoder.decode(&fragment).unwrap());
                fragment.clear();
            }
            rest = &rest[FRAME_HEADER_LEN + len..];
        }
        assert!(rest.is_empty(), "trailing partial frame");
        (blocks, seen, rewrite.is_rewriting())
    }

    fn request(authority: &'static [u8]) -> Vec<(&'static [u8], &'static [u8])> {
        vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", b"/cnpgi.identity.v1.Identity/Probe"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ]
    }

    #[tokio::test]
    async fn a_valid_authority_passes_byte_for_byte() {
        let client = client_bytes(
            &mut Encoder::new(),
            &[&request(b"localhost"), &request(b"localhost")],
            None,
        );
        let (blocks, seen, rewriting) = server_sees(client.clone()).await;
        assert_eq!(seen, client);
        assert!(!rewriting);
        assert_eq!(blocks.len(), 2);
    }

    #[tokio::test]
    async fn socket_paths_become_localhost_on_every_request() {
        for authority in [&b"/tmp/plugins/x.example.com"[..], b"%2Ftmp%2Fplugins%2Fx.example.com"] {
            let first = request(authority);
            let second = request(authority);
            // The second request refers to the client's dynamic table.
            let client = client_bytes(&mut Encoder::new(), &[&first, &second], None);
            let (blocks, _, rewriting) = server_sees(client).await;
            assert!(rewriting);
            assert_eq!(blocks.len(), 2);
            for block in blocks {
                let expected: Vec<(Vec<u8>, Vec<u8>)> = request(b"localhost")
                    .into_iter()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect();
                assert_eq!(block, expected);
            }
        }
    }

    #[tokio::test]
    async fn continuation_frames_in_and_out() {
        let big = vec![b'v'; 40_000];
        let big: &'static [u8] = Box::leak(big.into_boxed_slice());
        let mut headers = request(b"/tmp/sock");
        headers.push((b"x-big", big));
        let client = client_bytes(&mut Encoder::new(), &[&headers], Some(100));
        let (blocks, seen, rewriting) = server_sees(client).await;
        assert!(rewriting);
        assert_eq!(blocks[0][3], (b":authority".to_vec(), b"localhost".to_vec()));
        assert_eq!(blocks[0][6].1.len(), 40_000);
        // Re-encoded into frames no larger than the protocol minimum.
        let mut rest = &seen[PREFACE.len()..];
        while !rest.is_empty() {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            assert!(len <= MAX_OUT_FRAME);
            rest = &rest[FRAME_HEADER_LEN + len..];
        }
    }

    #[tokio::test]
    async fn garbage_is_handed_to_the_server_or_refused_never_a_panic() {
        // Not an HTTP/2 preface: handed through untouched.
        let (_, seen, _) = server_sees_raw(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
        assert_eq!(seen, b"GET / HTTP/1.1\r\n\r\n");
        // A HEADERS frame followed by DATA before END_HEADERS.
        let mut client = PREFACE.to_vec();
        client.extend_from_slice(&[0, 0, 1, HEADERS, 0, 0, 0, 0, 1, 0x82]);
        client.extend_from_slice(&[0, 0, 0, 0x0, 0, 0, 0, 0, 1]);
        let (result, _, _) = server_sees_raw(client).await;
        assert!(result.is_err());
        // A padded HEADERS frame whose padding exceeds its payload.
        let mut client = PREFACE.to_vec();
        client.extend_from_slice(&[0, 0, 1, HEADERS, PADDED | END_HEADERS, 0, 0, 0, 1, 9]);
        let (result, _, _) = server_sees_raw(client).await;
        assert!(
            result
                .unwrap_err()
                .to_string()
                .contains("malformed HTTP/2 HEADERS frame")
        );
    }

    async fn server_sees_raw(client: Vec<u8>) -> (io::Result<usize>, Vec<u8>, bool) {
        let (mut near, far) = tokio::io::duplex(1 << 16);
        let mut rewrite = AuthorityRewrite::new(far);
        near.write_all(&client).await.unwrap();
        near.shutdown().await.unwrap();
        let mut seen = Vec::new();
        let result = rewrite.read_to_end(&mut seen).await;
        let rewriting = rewrite.is_rewriting();
        (result, seen, rewriting)
    }
}
