//! Settings a running proxy swaps on SIGHUP (the reverse's ACL, the forward's SOCKS
//! users): each new connection reads the current value; connections already open keep
//! the one they started with.

use crate::{Acl, SocksAuth};
use std::sync::{Arc, PoisonError, RwLock};

/// A value shared between the proxy and whoever reloads it.
#[derive(Debug)]
pub struct Live<T>(Arc<RwLock<Arc<T>>>);

impl<T> Clone for Live<T> {
    fn clone(&self) -> Self {
        Live(Arc::clone(&self.0))
    }
}

impl<T> Live<T> {
    /// Shares `value`.
    pub fn new(value: T) -> Self {
        Live(Arc::new(RwLock::new(Arc::new(value))))
    }

    /// The current value.
    pub fn load(&self) -> Arc<T> {
        // A panic while the lock was held cannot leave a half-written Arc: keep serving.
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the value for every later [`Live::load`].
    pub fn store(&self, value: T) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(value);
    }
}

/// The reloadable parts of a started proxy: the forward has `socks_auth`, the reverse `acl`.
#[derive(Debug, Clone, Default)]
pub struct LiveSettings {
    /// Who may use the forward's SOCKS port.
    pub socks_auth: Option<Live<SocksAuth>>,
    /// Which targets the reverse may connect to.
    pub acl: Option<Live<Acl>>,
}
