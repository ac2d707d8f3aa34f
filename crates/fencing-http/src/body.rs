//! The response body of a fenced service: the inner service's body, or the
//! JSON of a rejection produced by the layer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of every response of a [`FencingService`](crate::FencingService):
    /// either the inner service's own body, passed through untouched, or the
    /// JSON error body of a request the layer refused.
    #[derive(Debug)]
    pub struct FencingBody<B> {
        #[pin]
        inner: Option<B>,
        rejection: Option<Bytes>,
    }
}

impl<B> FencingBody<B> {
    /// Wraps the inner service's body.
    pub(crate) fn inner(body: B) -> Self {
        FencingBody {
            inner: Some(body),
            rejection: None,
        }
    }

    /// A complete body produced by the layer.
    pub(crate) fn rejection(bytes: Bytes) -> Self {
        FencingBody {
            inner: None,
            rejection: Some(bytes),
        }
    }
}

impl<B> Body for FencingBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => inner.poll_frame(cx),
            None => Poll::Ready(this.rejection.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.rejection.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(self.rejection.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
