//! The library's spans: an acquire, a gate's admit and a release each open
//! one that carries the resource, the source and the token, inside the
//! caller's own span, so a user's request span contains the library's
//! requests and retries (issue 55, item 7).

use std::sync::{Arc, Mutex};

use fencing_core::{AcquireOptions, FencingSource, Gate, LocalSource, MemoryGate, ResourceName};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// A span opened: its name, its parent's name, its fields as text.
type Opened = (String, Option<String>, Vec<(String, String)>);

/// Every span opened.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Opened>>>);

struct Fields<'a>(&'a mut Vec<(String, String)>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).unwrap();
        let parent = span.parent().map(|p| p.name().to_owned());
        let mut fields = Vec::new();
        attrs.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push((span.name().to_owned(), parent, fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let name = ctx.span(id).unwrap().name().to_owned();
        let mut spans = self.0.lock().unwrap();
        if let Some(entry) = spans.iter_mut().rev().find(|(n, _, _)| *n == name) {
            values.record(&mut Fields(&mut entry.2));
        }
    }
}

#[tokio::test]
async fn acquire_admit_and_release_are_spans_inside_the_callers() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let source = LocalSource::open(dir.path()).unwrap();
    let gate = MemoryGate::new();
    let ledger = ResourceName::new("ledger").unwrap();
    let request = tracing::info_span!("request");
    let token = tracing::Instrument::instrument(
        async {
            let grant = source
                .acquire(&ledger, &AcquireOptions::new())
                .await
                .unwrap();
            gate.admit_grant(grant.info()).await.unwrap();
            let token = grant.token();
            grant.release().await.unwrap();
            token
        },
        request,
    )
    .await;
    let spans = spans.0.lock().unwrap().clone();
    let field = |fields: &[(String, String)], name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    for name in ["fencing.acquire", "fencing.admit", "fencing.release"] {
        let (_, parent, fields) = spans
            .iter()
            .find(|(n, _, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} span in {spans:?}"));
        assert_eq!(parent.as_deref(), Some("request"), "{name}'s parent");
        assert_eq!(
            field(fields, "resource").as_deref(),
            Some("ledger"),
            "{name}: {fields:?}"
        );
        assert_eq!(
            field(fields, "source").map(|s| s.contains("local")),
            Some(true),
            "{name}: {fields:?}"
        );
        assert_eq!(
            field(fields, "token"),
            Some(token.get().to_string()),
            "{name}: {fields:?}"
        );
    }
}
