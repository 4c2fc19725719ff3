//! One socket write per turn of the connection's task, however many times
//! HTTP/2 flushes in it.
//!
//! h2 (under tonic) writes a DATA frame of 256 bytes or more apart from the
//! frames around it, and flushes before it buffers the next one. A unary
//! answer with such a message (hello-world's ~1 KB patch) therefore left as
//! two TLS records in two writes: HEADERS and DATA, then the trailers. The
//! client woke up for each, which cost a bare call about 15 % (BENCHMARKS.md).
//! Go's gRPC server flushes once its queue is empty; this is the same idea,
//! as Netty's flush consolidation: the first flush of a batch only schedules
//! the task again, and the next flush (in the same turn, or in the turn the
//! wake-up starts) writes everything buffered at once.

use std::{
    io,
    pin::Pin,
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// Bytes held before a write goes through without waiting for a flush: a
/// few HTTP/2 frames, so a long answer still streams.
const LIMIT: usize = 64 * 1024;

/// Buffer capacity an idle connection keeps: a batch of small answers.
const KEEP: usize = 16 * 1024;

/// A stream whose writes are held until a flush, and whose first flush of a
/// batch is deferred to the next one (see the module's documentation).
/// Reads pass through.
pub(crate) struct BatchedWrites<S> {
    inner: S,
    buffer: Vec<u8>,
    /// How much of `buffer` the inner stream has taken.
    written: usize,
    /// A flush was asked for and deferred: the next one writes.
    flush_deferred: bool,
}

impl<S> BatchedWrites<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            buffer: Vec::new(),
            written: 0,
            flush_deferred: false,
        }
    }

    fn held(&self) -> usize {
        self.buffer.len() - self.written
    }
}

impl<S: AsyncWrite + Unpin> BatchedWrites<S> {
    /// Writes everything held to the inner stream (without flushing it).
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.buffer.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.buffer[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.buffer.clear();
        self.buffer.shrink_to(KEEP);
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes: drains first if they would pass the limit.
    fn poll_room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<()>> {
        if self.held() + len > LIMIT {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for BatchedWrites<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for BatchedWrites<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.poll_room(cx, buf.len()))?;
        if buf.len() > LIMIT {
            // The buffer is empty now; a copy would gain nothing.
            return Pin::new(&mut self.inner).poll_write(cx, buf);
        }
        self.buffer.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        ready!(self.poll_room(cx, len))?;
        if len > LIMIT {
            return Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            self.buffer.extend_from_slice(buf);
        }
        Poll::Ready(Ok(len))
    }

    /// Copying the slices into one buffer is what lets them leave in one
    /// write, so h2 may as well hand them over together.
    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.held() > 0 && !self.flush_deferred {
            // More frames may follow in this turn; the wake-up guarantees a
            // next flush if none does.
            self.flush_deferred = true;
            cx.waker().wake_by_ref();
            return Poll::Ready(Ok(()));
        }
        ready!(self.poll_drain(cx))?;
        self.flush_deferred = false;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_drain(cx))?;
        ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The peer's address and certificates, as for the stream itself.
impl<S: Connected> Connected for BatchedWrites<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        task::{Wake, Waker},
    };

    use super::*;

    /// Records each write it is given; takes at most `max_write` bytes per
    /// write, or fails every write with `fail`.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<Vec<u8>>,
        flushes: usize,
        shut_down: bool,
        max_write: Option<usize>,
        fail: Option<io::ErrorKind>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            if let Some(kind) = self.fail {
                return Poll::Ready(Err(kind.into()));
            }
            let n = self.max_write.map_or(buf.len(), |max| max.min(buf.len()));
            self.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.flushes += 1;
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.shut_down = true;
            Poll::Ready(Ok(()))
        }
    }

    #[derive(Default)]
    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Harness {
        stream: BatchedWrites<Recorder>,
        wakes: Arc<CountingWaker>,
        waker: Waker,
    }

    impl Harness {
        fn new(recorder: Recorder) -> Self {
            let wakes = Arc::new(CountingWaker::default());
            Self {
                stream: BatchedWrites::new(recorder),
                waker: Waker::from(wakes.clone()),
                wakes,
            }
        }

        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut cx = Context::from_waker(&self.waker);
            match Pin::new(&mut self.stream).poll_write(&mut cx, bytes) {
                Poll::Ready(result) => result,
                Poll::Pending => panic!("the recorder never blocks"),
            }
        }

        fn write_vectored(&mut self, parts: &[&[u8]]) -> io::Result<usize> {
            let slices: Vec<_> = parts.iter().map(|p| io::IoSlice::new(p)).collect();
            let mut cx = Context::from_waker(&self.waker);
            match Pin::new(&mut self.stream).poll_write_vectored(&mut cx, &slices) {
                Poll::Ready(result) => result,
                Poll::Pending => panic!("the recorder never blocks"),
            }
        }

        fn flush(&mut self) -> io::Result<()> {
            let mut cx = Context::from_waker(&self.waker);
            match Pin::new(&mut self.stream).poll_flush(&mut cx) {
                Poll::Ready(result) => result,
                Poll::Pending => panic!("the recorder never blocks"),
            }
        }

        fn shutdown(&mut self) -> io::Result<()> {
            let mut cx = Context::from_waker(&self.waker);
            match Pin::new(&mut self.stream).poll_shutdown(&mut cx) {
                Poll::Ready(result) => result,
                Poll::Pending => panic!("the recorder never blocks"),
            }
        }

        fn writes(&self) -> &[Vec<u8>] {
            &self.stream.inner.writes
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn frames_flushed_twice_in_a_turn_leave_in_one_write() {
        let mut h = Harness::new(Recorder::default());
        // HEADERS and a chained DATA frame, then h2's flush for room...
        assert_eq!(h.write_vectored(&[b"headers+data-head", b"payload"]).unwrap(), 24);
        h.flush().unwrap();
        assert!(h.writes().is_empty(), "the first flush of a batch must wait");
        assert_eq!(h.wakes(), 1, "a deferred flush must schedule the task again");
        // ...then the trailers and the flush that ends the turn.
        h.write(b"trailers").unwrap();
        h.flush().unwrap();
        assert_eq!(h.writes(), [b"headers+data-headpayloadtrailers".to_vec()]);
        assert_eq!(h.stream.inner.flushes, 1);
        assert_eq!(h.wakes(), 1);
    }

    #[test]
    fn a_deferred_flush_is_done_by_the_next_flush_without_new_writes() {
        let mut h = Harness::new(Recorder::default());
        h.write(b"ping ack").unwrap();
        h.flush().unwrap();
        assert!(h.writes().is_empty());
        // The turn the wake-up starts flushes again with nothing new.
        h.flush().unwrap();
        assert_eq!(h.writes(), [b"ping ack".to_vec()]);
        assert_eq!(h.stream.inner.flushes, 1);
    }

    #[test]
    fn flushing_nothing_passes_through_without_waking() {
        let mut h = Harness::new(Recorder::default());
        h.flush().unwrap();
        h.flush().unwrap();
        assert_eq!(h.wakes(), 0, "an idle connection must not spin");
        assert_eq!(h.stream.inner.flushes, 2);
        assert!(h.writes().is_empty());
    }

    #[test]
    fn partial_writes_of_the_inner_stream_keep_the_rest() {
        let mut h = Harness::new(Recorder {
            max_write: Some(3),
            ..Recorder::default()
        });
        h.write(b"abcdefgh").unwrap();
        h.flush().unwrap();
        h.flush().unwrap();
        assert_eq!(h.writes().concat(), b"abcdefgh");
        assert_eq!(h.stream.held(), 0);
    }

    #[test]
    fn more_than_the_limit_goes_out_without_a_flush() {
        let mut h = Harness::new(Recorder::default());
        let frame = vec![7u8; LIMIT / 2 + 1];
        h.write(&frame).unwrap();
        assert!(h.writes().is_empty());
        // The second frame would pass the limit: the first leaves now.
        h.write(&frame).unwrap();
        assert_eq!(h.writes(), std::slice::from_ref(&frame));
        h.flush().unwrap();
        h.flush().unwrap();
        assert!(
            h.stream.buffer.capacity() <= KEEP,
            "an idle connection keeps a large buffer"
        );
        // One larger than the limit is not copied at all.
        let huge = vec![9u8; LIMIT + 1];
        h.write(&huge).unwrap();
        assert!(
            h.writes() == [frame.clone(), frame, huge],
            "{} writes",
            h.writes().len()
        );
    }

    #[test]
    fn shutdown_writes_what_is_held_first() {
        let mut h = Harness::new(Recorder::default());
        h.write(b"goaway").unwrap();
        h.flush().unwrap();
        h.shutdown().unwrap();
        assert_eq!(h.writes(), [b"goaway".to_vec()]);
        assert!(h.stream.inner.shut_down);
    }

    #[test]
    fn an_error_of_the_inner_stream_reaches_the_flush_that_writes() {
        let mut h = Harness::new(Recorder {
            fail: Some(io::ErrorKind::BrokenPipe),
            ..Recorder::default()
        });
        h.write(b"data").unwrap();
        h.flush().unwrap();
        assert_eq!(h.flush().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
