//! The tower layer and service that gate requests before the storage
//! handler runs.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use fencing_core::{Gate, ResourceName};
use http::{Method, Request, Response};
use tokio::sync::OwnedMutexGuard;
use tower_layer::Layer;
use tower_service::Service;

use crate::body::FencingBody;
use crate::rejection::{token_from_headers, Rejection};
use crate::source::source_from_headers;

/// Finds the resource a request writes to. Returning `None` makes the layer
/// answer 400 for a gated request.
///
/// Implemented for every `Fn(&http::Request<B>) -> Option<String>` closure
/// and for [`ByPath`].
pub trait ResourceExtractor<B>: Send + Sync + 'static {
    /// The resource name for `request`, validated afterwards with
    /// [`ResourceName::new`].
    fn extract(&self, request: &Request<B>) -> Option<String>;
}

impl<B, F> ResourceExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, request: &Request<B>) -> Option<String> {
        self(request)
    }
}

/// The ready-made extractor: the resource is the request's path,
/// percent-decoded, without the query (`PUT /kv/a%20b?x=1` writes
/// `/kv/a b`).
///
/// Decoding makes two spellings of one key (`/kv/a` and `/kv/%61`) one
/// resource, as the handler sees them, so a stale writer cannot reach the
/// same key under a name the gate has no mark for. A path that does not
/// decode to UTF-8 has no resource (400). Paths that differ otherwise (a
/// trailing slash, `//`) are different resources: if the handler treats
/// them as one key, supply an extractor that normalises like the handler.
#[derive(Clone, Copy, Debug, Default)]
pub struct ByPath;

impl<B> ResourceExtractor<B> for ByPath {
    fn extract(&self, request: &Request<B>) -> Option<String> {
        percent_decode(request.uri().path())
    }
}

/// Decodes `%XX` escapes; a `%` not followed by two hex digits stays as it
/// is. `None` when the result is not UTF-8.
fn percent_decode(path: &str) -> Option<String> {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Which methods need a token.
#[derive(Clone, Debug)]
enum Methods {
    /// Everything but the safe methods of RFC 9110 (GET, HEAD, OPTIONS,
    /// TRACE).
    Unsafe,
    /// Every request.
    All,
    /// Exactly these.
    Only(Arc<[Method]>),
}

impl Methods {
    fn gates(&self, method: &Method) -> bool {
        match self {
            Methods::Unsafe => !matches!(
                *method,
                Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
            ),
            Methods::All => true,
            Methods::Only(list) => list.contains(method),
        }
    }
}

/// A tower [`Layer`] that makes a service which *is* the storage refuse
/// writes carrying a stale fencing token.
///
/// For each gated request the service:
///
/// 1. reads the token from the `Fencing-Token` header ([`HEADER`](crate::HEADER),
///    canonical decimal), the source that minted it from the optional
///    `Fencing-Source` header ([`SOURCE_HEADER`](crate::SOURCE_HEADER)),
///    and the resource from the request with its [`ResourceExtractor`];
/// 2. takes a per-resource async mutex, shared by every service this layer
///    (and its clones) produced;
/// 3. admits the token through the [`Gate`]: with a source header through
///    [`Gate::admit_from`] (a token of another source than the mark's is
///    refused), without one through the unbound [`Gate::admit_any_source`];
/// 4. calls the inner service and holds the mutex until the inner
///    service's future has finished, i.e. until the handler returned its
///    response.
///
/// Step 2 and 4 make admit and write one step, as [`Gate`] demands: two
/// writers of one resource are applied one after the other, in the order
/// they passed the gate, so a slower writer admitted first cannot land
/// after a newer one. Requests for different resources do not wait for
/// each other. Keep the write itself inside the inner service's future (not
/// in a task it spawns, nor in the streaming of the response body), and
/// give each gate exactly one layer: two layers built over the same gate
/// do not share their mutexes. A handler that hangs holds up the writers of
/// its resource, so bound it with a timeout inside this layer.
///
/// Refusals are answered by the layer itself, without calling the inner
/// service, with a JSON body (`Content-Type: application/json`):
///
/// | case | status | body |
/// | --- | --- | --- |
/// | header missing | 400 | `{"error":"missing Fencing-Token header"}` |
/// | header malformed or repeated | 400 | `{"error":"invalid fencing token \"-1\": ..."}` |
/// | no resource, or not a valid [`ResourceName`] | 400 | `{"error":"invalid resource name ..."}` |
/// | source header malformed or repeated | 400 | `{"error":"invalid fencing source \"%zz\": ..."}` |
/// | token below the gate's mark | 409 | `{"error":"stale fencing token","presented":3,"highest":5}` |
/// | mark bound to another source | 409 | `{"error":"foreign fencing source","resource":"/kv/a","expected":"etcd:6b2c","presented":"zk:prod"}` |
/// | mark bound to a source, no source header | 409 | `{"error":"fencing source required","resource":"/kv/a","expected":"etcd:6b2c"}` |
/// | a [`ValidatingGate`](fencing_core::ValidatingGate) knows no live grant with the token | 409 | `{"error":"unknown fencing token","resource":"/kv/a","token":99}` |
/// | the gate failed (I/O, backend) | 503 | `{"error":"fencing gate unavailable"}` (details are logged, not sent) |
///
/// A token equal to the mark passes, so a retried write with the same grant
/// is accepted. Clients turn a 409 back into the gate's error with
/// [`refusal_from_response`](crate::refusal_from_response). Stores that
/// face untrusted clients should wrap their gate in a
/// [`ValidatingGate`](fencing_core::ValidatingGate): a plain gate admits a
/// forged huge token and then refuses every real holder. By default only unsafe methods are gated: GET, HEAD,
/// OPTIONS and TRACE pass through without a token and without the mutex;
/// change this with [`gate_all_methods`](Self::gate_all_methods) or
/// [`gate_methods`](Self::gate_methods).
pub struct FencingLayer<G: ?Sized, E = ByPath> {
    gate: Arc<G>,
    extractor: Arc<E>,
    methods: Methods,
    locks: Arc<LockTable>,
}

impl<G: Gate + ?Sized> FencingLayer<G, ByPath> {
    /// A layer whose resource is the request path (see [`ByPath`]).
    #[must_use]
    pub fn by_path(gate: Arc<G>) -> Self {
        FencingLayer::with_extractor(gate, ByPath)
    }
}

impl<G: Gate + ?Sized, E> FencingLayer<G, E> {
    /// A layer with its own resource extractor, a closure
    /// `Fn(&http::Request<B>) -> Option<String>`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use fencing::MemoryGate;
    /// use fencing::http::FencingLayer;
    ///
    /// // One resource per tenant, named by a header.
    /// let layer = FencingLayer::new(Arc::new(MemoryGate::new()), |req: &http::Request<String>| {
    ///     req.headers().get("tenant")?.to_str().ok().map(|t| format!("tenant/{t}"))
    /// });
    /// # let _ = layer;
    /// ```
    #[must_use]
    pub fn new<B>(gate: Arc<G>, extractor: E) -> Self
    where
        E: Fn(&Request<B>) -> Option<String> + Send + Sync + 'static,
    {
        FencingLayer::with_extractor(gate, extractor)
    }

    /// A layer with any [`ResourceExtractor`] (a closure or a type of your
    /// own).
    #[must_use]
    pub fn with_extractor(gate: Arc<G>, extractor: E) -> Self {
        FencingLayer {
            gate,
            extractor: Arc::new(extractor),
            methods: Methods::Unsafe,
            locks: Arc::new(LockTable::default()),
        }
    }

    /// Gates every request, GET included (for a store whose reads must also
    /// come from the current holder).
    #[must_use]
    pub fn gate_all_methods(mut self) -> Self {
        self.methods = Methods::All;
        self
    }

    /// Gates exactly the listed methods; all others pass through.
    #[must_use]
    pub fn gate_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.methods = Methods::Only(methods.into_iter().collect());
        self
    }

    /// The gate this layer admits through.
    #[must_use]
    pub fn gate(&self) -> &Arc<G> {
        &self.gate
    }
}

impl<G: ?Sized, E> Clone for FencingLayer<G, E> {
    fn clone(&self) -> Self {
        FencingLayer {
            gate: self.gate.clone(),
            extractor: self.extractor.clone(),
            methods: self.methods.clone(),
            locks: self.locks.clone(),
        }
    }
}

impl<G: ?Sized, E> fmt::Debug for FencingLayer<G, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencingLayer")
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

impl<S, G: ?Sized, E> Layer<S> for FencingLayer<G, E> {
    type Service = FencingService<S, G, E>;

    fn layer(&self, inner: S) -> Self::Service {
        FencingService {
            inner,
            gate: self.gate.clone(),
            extractor: self.extractor.clone(),
            methods: self.methods.clone(),
            locks: self.locks.clone(),
        }
    }
}

/// The service made by [`FencingLayer`]: admits each gated request through
/// the gate, under a per-resource mutex held across the inner call.
pub struct FencingService<S, G: ?Sized, E = ByPath> {
    inner: S,
    gate: Arc<G>,
    extractor: Arc<E>,
    methods: Methods,
    locks: Arc<LockTable>,
}

impl<S: Clone, G: ?Sized, E> Clone for FencingService<S, G, E> {
    fn clone(&self) -> Self {
        FencingService {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            extractor: self.extractor.clone(),
            methods: self.methods.clone(),
            locks: self.locks.clone(),
        }
    }
}

impl<S: fmt::Debug, G: ?Sized, E> fmt::Debug for FencingService<S, G, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencingService")
            .field("inner", &self.inner)
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

/// The future of [`FencingService`].
pub type ResponseFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<FencingBody<B>>, E>> + Send + 'static>>;

impl<S, G, E, ReqBody, ResBody> Service<Request<ReqBody>> for FencingService<S, G, E>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
    G: Gate + ?Sized + 'static,
    E: ResourceExtractor<ReqBody>,
    ReqBody: Send + 'static,
{
    type Response = Response<FencingBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if !self.methods.gates(request.method()) {
            let future = self.inner.call(request);
            return Box::pin(async move { Ok(future.await?.map(FencingBody::inner)) });
        }
        let checked = token_from_headers(request.headers())
            .map_err(Rejection::MalformedToken)
            .and_then(|t| t.ok_or(Rejection::MissingToken))
            .and_then(|token| {
                let source =
                    source_from_headers(request.headers()).map_err(Rejection::MalformedSource)?;
                let name = self
                    .extractor
                    .extract(&request)
                    .ok_or(Rejection::NoResource)?;
                // A gate key never reaches a coordinator, so paths keep their form.
                let resource = ResourceName::nonportable(name).map_err(Rejection::BadResource)?;
                Ok((token, source, resource))
            });
        let (token, source, resource) = match checked {
            Ok(checked) => checked,
            Err(rejection) => return reject(rejection),
        };
        // The clone that was driven to readiness serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (gate, locks) = (self.gate.clone(), self.locks.clone());
        Box::pin(async move {
            let _held = ResourceLock::acquire(locks, resource).await;
            let r = _held.resource();
            let admitted = match &source {
                Some(source) => gate.admit_from(r, source, token).await,
                None => gate.admit_any_source(r, token).await,
            };
            if let Err(e) = admitted {
                let rejection = Rejection::from_gate(e, r);
                tracing::debug!(resource = %_held.resource(), %token, ?rejection, "fenced write refused");
                return Ok(rejection.into_response());
            }
            let response = inner.call(request).await?;
            Ok(response.map(FencingBody::inner))
        })
    }
}

fn reject<B, E>(rejection: Rejection) -> ResponseFuture<B, E>
where
    B: Send + 'static,
    E: Send + 'static,
{
    tracing::debug!(?rejection, "fenced request refused before the gate");
    let response = rejection.into_response();
    Box::pin(std::future::ready(Ok(response)))
}

/// Per-resource mutexes; an entry lives only while someone holds or waits
/// for it.
#[derive(Debug, Default)]
struct LockTable {
    slots: Mutex<HashMap<ResourceName, Arc<tokio::sync::Mutex<()>>>>,
}

impl LockTable {
    fn slots(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ResourceName, Arc<tokio::sync::Mutex<()>>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots().len()
    }
}

/// Holds (or waits for) one resource's mutex; removes the table entry on
/// drop when nobody else holds or waits for it, also when dropped while
/// still waiting (a cancelled request).
struct ResourceLock {
    table: Arc<LockTable>,
    resource: ResourceName,
    slot: Option<Arc<tokio::sync::Mutex<()>>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl ResourceLock {
    async fn acquire(table: Arc<LockTable>, resource: ResourceName) -> Self {
        let slot = table.slots().entry(resource.clone()).or_default().clone();
        let mut held = ResourceLock {
            table,
            resource,
            slot: Some(slot.clone()),
            guard: None,
        };
        held.guard = Some(slot.lock_owned().await);
        held
    }

    fn resource(&self) -> &ResourceName {
        &self.resource
    }
}

impl Drop for ResourceLock {
    fn drop(&mut self) {
        self.guard.take();
        self.slot.take();
        // Clones of a slot are only made under the table lock, so a count
        // of one (the table's own) seen under it means nobody holds or
        // waits for this mutex.
        let mut slots = self.table.slots();
        if slots
            .get(&self.resource)
            .is_some_and(|slot| Arc::strong_count(slot) == 1)
        {
            slots.remove(&self.resource);
        }
    }
}

#[cfg(test)]
mod tests;
