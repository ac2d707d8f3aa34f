//! Storage-side gates: keep the highest token accepted per resource and
//! refuse lower ones.

mod file;
mod memory;

use async_trait::async_trait;

pub use file::FileGate;
pub use memory::MemoryGate;

use crate::error::{Error, Result};
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// The check a storage runs before it accepts a write.
///
/// `admit` accepts a token greater than or equal to the resource's
/// high-water mark and raises the mark to it, atomically; it refuses a lower
/// token with [`Error::Stale`]. Equal tokens pass so a retried write with the
/// same grant is accepted.
///
/// The gate and the write must act as one step. A store that applies writes
/// concurrently must hold its own per-resource lock across `admit` and the
/// write, or a slower writer admitted first could land after a newer one.
/// Gates inside a database (one transaction) or a coordinator (one txn or
/// multi) get this for free.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{FencingToken, Gate, MemoryGate, ResourceName, Error};
///
/// let gate = MemoryGate::new();
/// let r = ResourceName::new("orders")?;
/// gate.admit(&r, FencingToken::new(34)).await?;
/// gate.admit(&r, FencingToken::new(34)).await?; // retry passes
/// gate.admit(&r, FencingToken::new(35)).await?;
/// let err = gate.admit(&r, FencingToken::new(34)).await.unwrap_err();
/// assert!(matches!(err, Error::Stale { .. }));
/// # Ok(()) }
/// ```
#[async_trait]
pub trait Gate: Send + Sync {
    /// Accepts `token` if it is not lower than the high-water mark, raising
    /// the mark; otherwise returns [`Error::Stale`] naming both tokens.
    async fn admit(&self, resource: &ResourceName, token: FencingToken) -> Result<()>;

    /// The high-water mark of a resource, `None` before its first admit.
    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;
}

/// The rule every gate applies: `Ok(true)` raises the mark, `Ok(false)` is a
/// retry at the mark, and a lower token is stale.
pub fn check_token(mark: Option<FencingToken>, presented: FencingToken) -> Result<bool> {
    match mark {
        Some(highest) if presented < highest => Err(Error::Stale { presented, highest }),
        Some(highest) => Ok(presented > highest),
        None => Ok(true),
    }
}
