//! Whether a node is ready to answer: the tables it writes opened, and the bucket
//! answering. `GET /ready` and the gRPC health service report it; load balancers send a
//! node traffic only once it is.
//!
//! A writer (`strata serve`, an ingest node) opens the tables it writes in the background
//! once it listens ([`open_tables`]): until every one is open, `/ready` answers 503 with
//! how far it got (or why a table would not open, retried until it does) and the gRPC
//! health service answers NOT_SERVING. A query service has nothing to open and is ready at
//! once ([`Startup::ready`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use strata_engine::Db;

/// What a node still has to do before it answers (nothing: ready).
#[derive(Debug)]
pub struct Startup {
    /// Why the node is not ready yet, or `None` once it is.
    waiting: tokio::sync::watch::Sender<Option<String>>,
}

impl Startup {
    /// A node with nothing to open.
    pub fn ready() -> Arc<Self> {
        Arc::new(Self {
            waiting: tokio::sync::watch::Sender::new(None),
        })
    }

    /// A node that is not ready until [`Startup::set_ready`] (or [`open_tables`]) says so,
    /// for the reason `why`.
    pub fn pending(why: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            waiting: tokio::sync::watch::Sender::new(Some(why.into())),
        })
    }

    /// Why the node is not ready, or `None` when it is.
    pub fn waiting(&self) -> Option<String> {
        self.waiting.borrow().clone()
    }

    /// Not ready, for the reason `why`.
    pub fn set_waiting(&self, why: impl Into<String>) {
        self.waiting.send_replace(Some(why.into()));
    }

    /// Ready from now on.
    pub fn set_ready(&self) {
        self.waiting.send_replace(None);
    }

    /// Resolves once the node is ready.
    pub async fn wait(&self) {
        let mut rx = self.waiting.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = rx.wait_for(Option::is_none).await;
    }
}

/// The longest pause between attempts to open a table that would not open.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// Opens, as their writer, the tables this node writes (every table; in a cluster, those
/// with a shard whose lease this node holds), reporting progress and failures on
/// `startup` and retrying a table that would not open (the bucket unreachable, say) with
/// a growing pause, until every one is open; then marks `startup` ready. A table dropped
/// meanwhile, or one whose shards another node took, is skipped.
pub async fn open_tables(db: Db, startup: Arc<Startup>) {
    let mut pause = Duration::from_millis(200);
    let mut opened: BTreeSet<String> = BTreeSet::new();
    loop {
        let tables = match db.list_tables().await {
            Ok(t) => t,
            Err(e) => {
                startup.set_waiting(format!("reading the catalog: {e}"));
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
                continue;
            }
        };
        let held: Option<BTreeSet<u64>> = db
            .in_cluster()
            .then(|| db.held_shards().into_iter().map(|(t, _)| t).collect());
        let mine: Vec<String> = tables
            .iter()
            .filter(|t| held.as_ref().is_none_or(|h| h.contains(&t.id)))
            .map(|t| t.name.clone())
            .filter(|n| !opened.contains(n))
            .collect();
        let total = opened.len() + mine.len();
        let mut failed = None;
        for name in mine {
            startup.set_waiting(format!(
                "opening tables: {} of {total} open, opening {name}",
                opened.len()
            ));
            match db.table(&name).await {
                Ok(_) => {
                    opened.insert(name);
                }
                Err(
                    strata_engine::Error::TableNotFound(_) | strata_engine::Error::NotOwner { .. },
                ) => {
                    opened.insert(name);
                }
                Err(e) => {
                    tracing::warn!(table = %name, error = %e, "opening a table at start failed; retrying");
                    failed = Some(format!(
                        "opening tables: {} of {total} open; table {name} did not open: {e}",
                        opened.len()
                    ));
                }
            }
        }
        match failed {
            None => {
                tracing::info!(tables = opened.len(), "tables open: ready");
                startup.set_ready();
                return;
            }
            Some(why) => {
                startup.set_waiting(why);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pending_start_says_why_until_ready() {
        let s = Startup::pending("opening tables");
        assert_eq!(s.waiting().as_deref(), Some("opening tables"));
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move { s.wait().await })
        };
        s.set_waiting("opening tables: 1 of 2 open");
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        s.set_ready();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("ready wakes the waiter")
            .expect("joined");
        assert_eq!(s.waiting(), None);
        // Ready at once: nothing to wait for.
        tokio::time::timeout(Duration::from_secs(5), Startup::ready().wait())
            .await
            .expect("a ready start does not wait");
    }
}
