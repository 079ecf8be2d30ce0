//! Pins compared again while the gateway serves.
//!
//! Each upstream's `tools/list` is compared with its pins at start, then
//! every `refresh_secs` and whenever the upstream sends
//! `notifications/tools/list_changed`. The served [`Catalog`] is rebuilt
//! from every upstream's last comparison and swapped into the gateway
//! ([`Gateway::set_catalog`]): a tool whose upstream definition no longer
//! matches its pin is withheld from the next request on (not listed, a
//! call is an unknown tool), and served again once the upstream offers the
//! pinned definition again. Each new reason to withhold is logged as a
//! warning in the words used at start.
//!
//! A refresh that fails (the upstream down, a timeout) keeps that
//! upstream's last comparison, and says so in a warning. That does not fail
//! open: the gateway only ever lists pinned definitions and checks every
//! call against the pinned schema, so what it serves is still what the
//! operator pinned; a call to an upstream that is down fails on its own.

use std::collections::BTreeSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use toolgate::contract::Policy;

use crate::catalog::Catalog;
use crate::config::Upstream;
use crate::entries::{Entry, EntryRefresh};
use crate::gateway::Gateway;
use crate::pin::{Offered, PinFile, Refresh, compare};
use crate::upstream::{UpstreamClient, UpstreamError};
use crate::wire::Decide;

/// One upstream as the refresh sees it.
struct Watched {
    upstream: Upstream,
    pins: PinFile,
    client: Arc<UpstreamClient>,
    /// Its last comparison that succeeded.
    last: Refresh,
    /// Its resources', templates' and prompts' last comparison.
    entries_last: EntryRefresh,
    /// What was last said about it, so a refresh repeats nothing.
    said: BTreeSet<String>,
}

/// The upstreams, their pins and their last comparisons; builds the
/// catalog.
pub struct Watch {
    policy: Arc<Policy>,
    watched: Vec<Watched>,
}

impl Watch {
    /// Nothing watched yet; tools are checked against `policy`.
    pub fn new(policy: Arc<Policy>) -> Self {
        Self {
            policy,
            watched: Vec::new(),
        }
    }

    /// Adds `upstream`, reached through `client`, with what it offered at
    /// start.
    pub fn add(
        &mut self,
        upstream: &Upstream,
        pins: PinFile,
        client: Arc<UpstreamClient>,
        offered: &[Offered],
        entries: &[Entry],
    ) {
        let last = compare(&pins, offered);
        let entries_last = crate::entries::compare(&pins.entries, entries);
        self.watched.push(Watched {
            upstream: upstream.clone(),
            pins,
            client,
            last,
            entries_last,
            said: BTreeSet::new(),
        });
    }

    /// The policy the catalog is checked against.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// The catalog of every upstream's last comparison, and each line for
    /// the operator (upstream, note) not said before.
    pub fn catalog(&mut self) -> (Catalog, Vec<(String, String)>) {
        let mut catalog = Catalog::default();
        let mut news = Vec::new();
        for w in &mut self.watched {
            let mut notes: BTreeSet<String> = catalog
                .add_upstream(&self.policy, &w.upstream, &w.pins, &w.last)
                .into_iter()
                .collect();
            notes.extend(catalog.add_entries(&w.upstream, &w.pins, &w.entries_last, &w.client));
            news.extend(
                notes
                    .difference(&w.said)
                    .map(|n| (w.upstream.name.clone(), n.clone())),
            );
            w.said = notes;
        }
        (catalog, news)
    }

    /// Takes upstream `i`'s new `tools/list` (or the failure to get it) and
    /// returns the catalog to serve from now on, if it was compared.
    fn apply(
        &mut self,
        i: usize,
        offered: Result<Vec<Offered>, UpstreamError>,
        entries: Result<Vec<Entry>, UpstreamError>,
    ) -> Option<Catalog> {
        let w = &mut self.watched[i];
        match entries {
            Ok(e) => w.entries_last = crate::entries::compare(&w.pins.entries, &e),
            Err(e) => tracing::warn!(
                upstream = w.upstream.name.as_str(),
                "refreshing the resource and prompt lists failed ({e}); their last comparison stands"
            ),
        }
        let offered = match offered {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(
                    upstream = w.upstream.name.as_str(),
                    "refreshing the tool list failed ({e}); its last comparison with the pins stands"
                );
                return None;
            }
        };
        let before = w.last.current.clone();
        w.last = compare(&w.pins, &offered);
        for tool in w.last.current.iter().filter(|t| !before.contains(t)) {
            tracing::info!(
                upstream = w.upstream.name.as_str(),
                "tool `{tool}` matches its pin again"
            );
        }
        let (catalog, news) = self.catalog();
        for (upstream, note) in news {
            tracing::warn!(upstream = upstream.as_str(), "{note}");
        }
        Some(catalog)
    }

    /// Compares the pins again while `gateway` serves: one task per
    /// upstream waits for its interval or its `list_changed` and asks for
    /// its list; one task applies the answers in turn and swaps the
    /// catalog. An upstream with no interval is compared on `list_changed`
    /// only.
    pub fn spawn<D: Decide>(mut self, gateway: Gateway<D>) {
        let (tx, mut rx) = mpsc::channel(self.watched.len().max(1));
        for (i, w) in self.watched.iter().enumerate() {
            let client = Arc::clone(&w.client);
            let every = w.upstream.refresh;
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    match every {
                        Some(every) => tokio::select! {
                            () = tokio::time::sleep(every) => {}
                            () = client.list_changed() => {}
                        },
                        None => client.list_changed().await,
                    }
                    let listed = (client.offered().await, client.offered_entries().await);
                    if tx.send((i, listed)).await.is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        tokio::spawn(async move {
            while let Some((i, (offered, entries))) = rx.recv().await {
                if let Some(catalog) = self.apply(i, offered, entries) {
                    gateway.set_catalog(catalog);
                }
            }
        });
    }
}
