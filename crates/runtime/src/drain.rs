//! Graceful shutdown shared by both roles: after SIGTERM the role has stopped taking new
//! work; this lets the open streams finish, up to the configured limit, and only then
//! closes the sessions, so `systemctl stop` (or a restart) does not cut transfers.

use crate::driver::Driver;
use std::time::Duration;
use tokio::task::JoinSet;

/// How often the drain checks whether every byte sent has been acknowledged once the
/// stream tasks are done (the data may still be in flight in the transport).
const QUIESCENCE_POLL: Duration = Duration::from_millis(20);
/// How long the sessions' CLOSE may take to go out before the driver is left behind.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Waits until every task in `tasks` has ended and every session has delivered what it
/// sent, or until `limit` passes (then the remaining tasks are aborted); then closes
/// every session and waits for the driver to stop.
pub(crate) async fn drain_and_close(driver: &Driver, tasks: &mut JoinSet<()>, limit: Duration) {
    tracing::info!(
        streams = tasks.len(),
        limit = ?limit,
        "draining: no new connections; open streams may finish"
    );
    let finished = tokio::time::timeout(limit, async {
        while tasks.join_next().await.is_some() {}
        while !driver.is_quiescent() {
            tokio::time::sleep(QUIESCENCE_POLL).await;
        }
    })
    .await;
    if finished.is_err() {
        tracing::warn!(
            streams = tasks.len().max(driver.open_streams()),
            "drain limit reached; cutting the remaining streams"
        );
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
    driver.close_all();
    if tokio::time::timeout(CLOSE_WAIT, driver.stopped())
        .await
        .is_err()
    {
        tracing::debug!("driver still closing sessions; exiting anyway");
    }
    tracing::info!("drained; stopped");
}
