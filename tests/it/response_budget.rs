//! The controller's response budget against the hostile fixture's big answers: many servers
//! answering large bodies at once (announced JSON, chunked JSON, an event stream) through one
//! shared budget. Every read ends — with its catalogue, or refused with a budget reason — and the
//! budget's own high-water mark never passes its size. A read that alone needs more than the
//! whole budget is refused at once, with the reason and the flag to change.

use crate::support;

use std::time::Duration;

use mcp_operator::mcp::{self, EndpointPolicy, ResponseBudget, ServerConnection};
use support::Fixtures;

const MIB: u64 = 1024 * 1024;

fn connection(url: String, budget: &ResponseBudget) -> ServerConnection {
    mcp_operator::install_crypto_provider();
    let mut conn = ServerConnection::new(url);
    conn.endpoint_policy = EndpointPolicy {
        allow_loopback: true,
    };
    // Longer than any wait for the budget here: a read must end by the budget's rules, never
    // by its deadline.
    conn.limits.connect_timeout = Duration::from_secs(60);
    conn.limits.max_response_bytes = 16 * MIB;
    conn.budget = Some(budget.clone());
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_big_answers_at_once_never_pass_the_budget_and_every_read_ends() {
    let server = Fixtures::load().hostile_server();
    // 6 MB in one announced JSON page (bulk), 8 MiB announced (huge), 8 MiB chunked JSON and
    // 8 MiB in an event stream, neither announcing its length.
    let bulk = format!(
        "{}/bulk/mcp?tools=20&pages=1&schema_bytes=6000000",
        server.url
    );
    let urls: Vec<String> = (0..12)
        .map(|i| match i % 4 {
            0 => bulk.clone(),
            1 => format!("{}/huge/mcp", server.url),
            2 => format!("{}/huge-chunked/mcp", server.url),
            _ => format!("{}/huge-sse/mcp", server.url),
        })
        .collect();
    // Room for about three big answers at a time, a third of what the twelve need at once.
    let budget = ResponseBudget::new(30 * MIB);
    let reads: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let conn = connection(url, &budget);
            tokio::spawn(async move {
                // The report (and its share of the budget) is dropped here, as the controller
                // drops it once the catalogue is built.
                match mcp::read_server(&conn).await {
                    Ok(report) => Ok(report.tools.len()),
                    Err(failure) => Err((failure.error.reason(), failure.error.to_string())),
                }
            })
        })
        .collect();
    let (mut read, mut busy) = (0, 0);
    for task in reads {
        let ended = tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("every read ends")
            .unwrap();
        match ended {
            Ok(tools) => {
                assert!(tools >= 1);
                read += 1;
            }
            Err((reason, message)) => {
                assert_eq!(reason, "ResponseBudgetBusy", "{message}");
                assert!(message.contains("tried again"), "{message}");
                busy += 1;
            }
        }
    }
    println!(
        "12 big answers through a 30 MiB budget: {read} read, {busy} gave way; at most {} bytes held at once",
        budget.high_water()
    );
    assert!(read >= 1, "the budget lets at least one big answer through");
    assert!(
        budget.high_water() <= budget.total(),
        "high water {} over the budget {}",
        budget.high_water(),
        budget.total()
    );
    assert!(
        budget.high_water() >= 12 * MIB,
        "several big answers were held at once ({} bytes at most)",
        budget.high_water()
    );
    assert_eq!(budget.in_use(), 0, "every read gave its share back");
}

#[tokio::test]
async fn a_read_larger_than_the_whole_budget_is_refused_at_once() {
    let server = Fixtures::load().hostile_server();
    let budget = ResponseBudget::new(4 * MIB);
    for mode in ["huge", "huge-chunked", "huge-sse"] {
        let conn = connection(format!("{}/{mode}/mcp", server.url), &budget);
        let failure = tokio::time::timeout(Duration::from_secs(30), mcp::read_server(&conn))
            .await
            .expect("refused, not left waiting")
            .unwrap_err();
        assert_eq!(failure.error.reason(), "ResponseBudgetExceeded", "{mode}");
        let message = failure.error.to_string();
        assert!(message.contains("4194304 bytes"), "{message}");
        assert!(message.contains("--response-budget"), "{message}");
        assert_eq!(
            budget.in_use(),
            0,
            "{mode}: the refused read gave back what it held"
        );
    }
    // Small answers still fit.
    let conn = connection(format!("{}/ok/mcp", server.url), &budget);
    let report = mcp::read_server(&conn).await.unwrap();
    assert_eq!(report.tools.len(), 6);
    assert!(budget.in_use() > 0, "the report holds its pages");
    drop(report);
    assert_eq!(budget.in_use(), 0);
}
