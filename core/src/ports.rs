//! The ports through which hosts drive core (SPEC §2.2).

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: the shape every asynchronous port returns.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
