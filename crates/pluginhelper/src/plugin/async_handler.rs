//! The handlers of the services that do I/O: the bound every `async`
//! handler meets ([`AsyncHandler`]), and how one is stored and called.

use std::{future::Future, pin::Pin, sync::Arc};

use tonic::Status;

/// An `async` handler: called with what its RPC received (`C`), it answers
/// `T` or the error status the call fails with.
///
/// Any `Fn(C) -> impl Future<Output = Result<T, Status>>` that can be
/// shared between threads is one: a closure returning an `async` block, or
/// an `async fn` taking `C`.
///
/// ```
/// use cnpgi_pluginhelper::prelude::*;
///
/// async fn status(_: WalStatusCall<()>) -> Result<WalStatusResult, Status> {
///     Ok(WalStatusResult::default())
/// }
///
/// let plugin = Plugin::<()>::new(GetPluginMetadataResponse::default())
///     .wal_status(status)
///     .wal_archive(|call| async move {
///         println!("archiving {}", call.file);
///         Ok(())
///     });
/// # drop(plugin);
/// ```
pub trait AsyncHandler<C, T>: Fn(C) -> <Self as AsyncHandler<C, T>>::Future + Send + Sync + 'static {
    /// What a call returns.
    type Future: Future<Output = Result<T, Status>> + Send + 'static;
}

impl<C, T, F, Fut> AsyncHandler<C, T> for F
where
    F: Fn(C) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, Status>> + Send + 'static,
{
    type Future = Fut;
}

/// What a stored handler's future resolves to.
type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, Status>> + Send>>;
/// An `async` handler, stored.
pub(super) type BoxedHandler<C, T> = Arc<dyn Fn(C) -> BoxFuture<T> + Send + Sync>;

/// Stores an `async` handler.
pub(super) fn boxed<C, T>(handler: impl AsyncHandler<C, T>) -> BoxedHandler<C, T> {
    Arc::new(move |call| Box::pin(handler(call)))
}

/// The `async` handler of one RPC, once registered.
pub(super) struct AsyncRpc<C, T>(Option<BoxedHandler<C, T>>);

impl<C, T> Default for AsyncRpc<C, T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<C, T> AsyncRpc<C, T> {
    /// Registers `handler`, in place of the one registered before, if any.
    pub(super) fn register(&mut self, handler: impl AsyncHandler<C, T>) {
        self.0 = Some(boxed(handler));
    }

    pub(super) fn is_registered(&self) -> bool {
        self.0.is_some()
    }

    /// Answers a call of `rpc`: `UNIMPLEMENTED` (naming it) without a
    /// handler; else the handler's answer to the call `decode` makes of the
    /// request, which is decoded only then.
    pub(super) async fn call(&self, rpc: &str, decode: impl FnOnce() -> Result<C, Status>) -> Result<T, Status> {
        let handler = self
            .0
            .as_ref()
            .ok_or_else(|| Status::unimplemented(format!("{rpc} is not implemented by this plugin")))?;
        handler(decode()?).await
    }
}
