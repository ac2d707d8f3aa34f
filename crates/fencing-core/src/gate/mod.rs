//! Storage-side gates: keep the highest token accepted per resource and
//! refuse lower ones, and tokens of another source.

#[cfg(feature = "local")]
mod file;
mod memory;
mod validating;

use async_trait::async_trait;
use tracing::Instrument;

#[cfg(feature = "local")]
pub use file::FileGate;
pub use memory::MemoryGate;
pub use validating::ValidatingGate;

use crate::error::{Error, Result};
use crate::grant::{GrantInfo, SourceId};
use crate::resource::ResourceName;
use crate::token::FencingToken;

/// The check a storage runs before it accepts a write.
///
/// A gate keeps one mark per resource: the highest token it accepted and,
/// once a bound admit set it, the [`SourceId`] of the source that minted
/// that token. Tokens of different sources are not comparable (two etcd
/// clusters, an etcd and a ZooKeeper ensemble, a cluster restored from a
/// backup), so a gate that mixed them could admit a stale write, or raise a
/// mark so high that the real holder is refused forever.
///
/// - [`admit_grant`](Self::admit_grant) (and [`admit_from`](Self::admit_from),
///   which takes the three parts apart) is the **bound** form, the one to
///   use: it refuses a token of another source than the mark's with
///   [`Error::ForeignSource`], then applies the token rule below. The first
///   bound admit of a resource binds its mark.
/// - [`admit_any_source`](Self::admit_any_source) is the **unbound** form,
///   for a store that only ever sees one source and whose writers do not
///   send a source: it skips the source check. It applies the token rule
///   alone while the mark is unbound, and refuses with
///   [`Error::UnnamedSource`] once a bound admit has bound the mark (it
///   cannot tell whether the token came from that source).
///
/// A gate implements one method, [`admit_with`](Self::admit_with) (the
/// source as an `Option`), and [`high_water`](Self::high_water); the three
/// forms above are provided. [`check_token`], [`check_source`] and
/// [`next_mark`] are the rules, for implementations to share.
///
/// The token rule: a token greater than or equal to the resource's mark is
/// accepted and raises the mark to it, atomically; a lower token is refused
/// with [`Error::Stale`]. Equal tokens pass so a retried write with the
/// same grant is accepted.
///
/// Nothing in a plain gate checks that a token was ever minted: a client
/// that sends a forged huge token (say `u64::MAX`) is admitted, raises the
/// mark, and every real holder is refused from then on. Where clients are
/// not trusted that far, wrap the gate in a [`ValidatingGate`], which asks
/// the source before it raises a mark. A token is not a credential either:
/// whoever can present the current token can write, so authenticate
/// clients separately.
///
/// The gate and the write must act as one step. A store that applies writes
/// concurrently must hold its own per-resource lock across `admit` and the
/// write, or a slower writer admitted first could land after a newer one.
/// Gates inside a database (one transaction) or a coordinator (one txn or
/// multi) get this for free.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> fencing_core::Result<()> {
/// use fencing_core::{Error, FencingToken, Gate, MemoryGate, ResourceName, SourceId};
///
/// let gate = MemoryGate::new();
/// let r = ResourceName::new("orders")?;
/// let (etcd, zk) = (SourceId::new("etcd:6b2c"), SourceId::new("zk:prod"));
/// gate.admit_from(&r, &etcd, FencingToken::new(34)).await?;
/// gate.admit_from(&r, &etcd, FencingToken::new(34)).await?; // retry passes
/// gate.admit_from(&r, &etcd, FencingToken::new(35)).await?;
/// let err = gate.admit_from(&r, &etcd, FencingToken::new(34)).await.unwrap_err();
/// assert!(matches!(err, Error::Stale { .. }));
/// // Another source's token is refused, however high: not comparable.
/// let err = gate.admit_from(&r, &zk, FencingToken::new(1 << 40)).await.unwrap_err();
/// assert!(matches!(err, Error::ForeignSource { .. }));
/// assert_eq!(gate.high_water(&r).await?, Some(FencingToken::new(35)));
/// # Ok(()) }
/// ```
///
/// # Implementing
///
/// The trait is used as `dyn Gate`, so it is declared with the
/// [`async-trait`](https://docs.rs/async-trait) crate: an implementation
/// adds `async-trait = "0.1"` to its dependencies and puts
/// `#[async_trait]` on its `impl`. Two methods are required, `admit_with`
/// and `high_water`; [`backend::next_mark`](crate::backend::next_mark)
/// is the token and source rule, for a store that keeps its own marks.
///
/// ```
/// use async_trait::async_trait;
/// use fencing_core::{FencingToken, Gate, MemoryGate, ResourceName, Result, SourceId};
///
/// /// Logs every admit; the marks live in a `MemoryGate`.
/// struct Logged(MemoryGate);
///
/// #[async_trait]
/// impl Gate for Logged {
///     async fn admit_with(
///         &self,
///         resource: &ResourceName,
///         source: Option<&SourceId>,
///         token: FencingToken,
///     ) -> Result<()> {
///         let admitted = self.0.admit_with(resource, source, token).await;
///         println!("{resource} {token}: {admitted:?}");
///         admitted
///     }
///
///     async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
///         self.0.high_water(resource).await
///     }
/// }
/// ```
#[async_trait]
pub trait Gate: Send + Sync {
    /// What every form comes down to: with `source`, the bound form (a
    /// token of another source than the mark's is refused with
    /// [`Error::ForeignSource`], the mark unchanged, and an admitted token
    /// binds an unbound mark to `source`); without, the unbound form
    /// (refused with [`Error::UnnamedSource`] once the mark is bound). Then
    /// the token rule: not lower than the mark passes and raises it, lower
    /// is [`Error::Stale`] naming both tokens.
    async fn admit_with(
        &self,
        resource: &ResourceName,
        source: Option<&SourceId>,
        token: FencingToken,
    ) -> Result<()>;

    /// The bound form with the resource, source and token of a grant
    /// (`grant.info()`, or the [`GrantInfo`] that [`fenced`](crate::fenced)
    /// and a leader's context hand their work): the call to use.
    async fn admit_grant(&self, grant: &GrantInfo) -> Result<()> {
        self.admit_with(&grant.resource, Some(&grant.source), grant.token)
            .instrument(admit_span(
                &grant.resource,
                Some(&grant.source),
                grant.token,
            ))
            .await
    }

    /// The bound form, from its parts (a token that came over the wire
    /// with its source id).
    async fn admit_from(
        &self,
        resource: &ResourceName,
        source: &SourceId,
        token: FencingToken,
    ) -> Result<()> {
        self.admit_with(resource, Some(source), token)
            .instrument(admit_span(resource, Some(source), token))
            .await
    }

    /// The unbound form: the token rule alone, skipping the source check.
    /// Use it only where every writer's token comes from one source.
    async fn admit_any_source(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
        self.admit_with(resource, None, token)
            .instrument(admit_span(resource, None, token))
            .await
    }

    /// The high-water mark of a resource, `None` before its first admit.
    async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>>;
}

/// The span of a gate's admit: which write, from which grant.
fn admit_span(
    resource: &ResourceName,
    source: Option<&SourceId>,
    token: FencingToken,
) -> tracing::Span {
    tracing::debug_span!(
        "fencing.admit",
        %resource,
        source = source.map(SourceId::as_str),
        token = token.get(),
    )
}

/// A gate behind a pointer is a gate: `Arc<G>`, `Box<G>` and `&G` (also of
/// `dyn Gate`) go wherever a gate is asked for.
macro_rules! forward_gate {
    ($($pointer:ty),*) => {$(
        #[async_trait]
        impl<G: Gate + ?Sized> Gate for $pointer {
            async fn admit_with(
                &self,
                resource: &ResourceName,
                source: Option<&SourceId>,
                token: FencingToken,
            ) -> Result<()> {
                (**self).admit_with(resource, source, token).await
            }

            async fn admit_grant(&self, grant: &GrantInfo) -> Result<()> {
                (**self).admit_grant(grant).await
            }

            async fn admit_from(
                &self,
                resource: &ResourceName,
                source: &SourceId,
                token: FencingToken,
            ) -> Result<()> {
                (**self).admit_from(resource, source, token).await
            }

            async fn admit_any_source(&self, resource: &ResourceName, token: FencingToken) -> Result<()> {
                (**self).admit_any_source(resource, token).await
            }

            async fn high_water(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
                (**self).high_water(resource).await
            }
        }
    )*};
}

forward_gate!(std::sync::Arc<G>, Box<G>, &G);

/// A resource's high-water mark and the source it is bound to (`None`
/// until a bound admit sets it, or when read from an old gate file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The highest token accepted.
    pub token: FencingToken,
    /// The source that minted it, when the mark is bound.
    pub source: Option<SourceId>,
}

/// The rule every gate applies to the token: `Ok(true)` raises the mark,
/// `Ok(false)` is a retry at the mark, and a lower token is stale.
pub fn check_token(mark: Option<FencingToken>, presented: FencingToken) -> Result<bool> {
    match mark {
        Some(highest) if presented < highest => Err(refused(Error::Stale { presented, highest })),
        Some(highest) => Ok(presented > highest),
        None => Ok(true),
    }
}

/// The rule every gate applies to the source, before the token: a bound
/// mark refuses a token of another source ([`Error::ForeignSource`]) and a
/// token that names none ([`Error::UnnamedSource`]); an unbound mark takes
/// any.
pub fn check_source(
    resource: &ResourceName,
    bound: Option<&SourceId>,
    presented: Option<&SourceId>,
) -> Result<()> {
    match (bound, presented) {
        (None, _) => Ok(()),
        (Some(b), Some(p)) if b == p => Ok(()),
        (Some(b), Some(p)) => Err(refused(Error::ForeignSource {
            expected: b.clone(),
            presented: p.clone(),
        })),
        (Some(b), None) => Err(refused(Error::UnnamedSource {
            resource: resource.clone(),
            expected: b.clone(),
        })),
    }
}

/// The source rule of a gate bound to one source from the start (its marks
/// live in the cluster that mints the tokens, or it validates against one
/// source): a token named as another source's is refused with
/// [`Error::ForeignSource`]; an unnamed one is taken to be `fixed`'s.
pub fn check_fixed_source(
    resource: &ResourceName,
    fixed: &SourceId,
    presented: Option<&SourceId>,
) -> Result<()> {
    match presented {
        Some(presented) => check_source(resource, Some(fixed), Some(presented)),
        None => Ok(()),
    }
}

/// Counts a refusal in the metrics and passes it on.
pub(crate) fn refused(error: Error) -> Error {
    crate::metrics::gate_refused(&error);
    error
}

/// Both rules at once: the mark to store after admitting `token` (from
/// `source`, `None` for the unbound form) against `current`, `Ok(None)`
/// when the mark stays as it is (a retry), or the refusal.
pub fn next_mark(
    resource: &ResourceName,
    current: Option<&Mark>,
    source: Option<&SourceId>,
    token: FencingToken,
) -> Result<Option<Mark>> {
    let bound = current.and_then(|m| m.source.as_ref());
    check_source(resource, bound, source)?;
    let raises = check_token(current.map(|m| m.token), token)?;
    // An unbound mark takes the source of the first bound admit, also at
    // an equal token.
    let binds = bound.is_none() && source.is_some();
    Ok((raises || binds).then(|| Mark {
        token,
        source: bound.or(source).cloned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(token: u64, source: Option<&str>) -> Mark {
        Mark {
            token: FencingToken::new(token),
            source: source.map(SourceId::new),
        }
    }

    #[test]
    fn next_mark_binds_checks_the_source_first_then_the_token() {
        let r = ResourceName::new("r").unwrap();
        let (a, b) = (SourceId::new("a"), SourceId::new("b"));
        let t = FencingToken::new;
        assert_eq!(
            next_mark(&r, None, Some(&a), t(5)).unwrap(),
            Some(mark(5, Some("a")))
        );
        assert_eq!(
            next_mark(&r, None, None, t(5)).unwrap(),
            Some(mark(5, None))
        );
        let bound = mark(5, Some("a"));
        assert_eq!(next_mark(&r, Some(&bound), Some(&a), t(5)).unwrap(), None);
        assert!(matches!(
            next_mark(&r, Some(&bound), Some(&b), t(9)),
            Err(Error::ForeignSource { .. })
        ));
        assert!(matches!(
            next_mark(&r, Some(&bound), Some(&b), t(1)),
            Err(Error::ForeignSource { .. })
        ));
        assert!(matches!(
            next_mark(&r, Some(&bound), None, t(9)),
            Err(Error::UnnamedSource { .. })
        ));
        let unbound = mark(5, None);
        assert_eq!(
            next_mark(&r, Some(&unbound), Some(&b), t(5)).unwrap(),
            Some(mark(5, Some("b")))
        );
        assert!(matches!(
            next_mark(&r, Some(&unbound), Some(&b), t(4)),
            Err(Error::Stale { .. })
        ));
        assert_eq!(next_mark(&r, Some(&unbound), None, t(5)).unwrap(), None);
    }
}
