//! Events about one object. Publishing is best effort: a failure is logged, never fails the
//! reconcile (the status says what the event would). The reconcilers publish a transition's
//! events before the status write that records it, so a crash in between repeats the event on
//! the next reconcile (at least once; the Event series counts repeats) instead of losing it.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};

/// Publishes `events` about the object `reference` names.
pub async fn publish(recorder: &Recorder, reference: &ObjectReference, events: Vec<Event>) {
    for event in events {
        if let Err(e) = recorder.publish(&event, reference).await {
            tracing::warn!(
                object = reference.name.as_deref().unwrap_or(""),
                namespace = reference.namespace.as_deref().unwrap_or(""),
                "could not publish an event: {e}"
            );
        }
    }
}
