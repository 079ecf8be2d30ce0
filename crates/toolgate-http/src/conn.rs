//! Fair connections for [`crate::serve`]: which accepted connection gets a
//! slot, which one gives its slot up, and when a connection ends.
//!
//! A keep-alive connection holds a slot while it sits idle between
//! requests, so a client that opens many of them and sends a request now
//! and then (or never) would otherwise hold every slot, and the probes
//! an orchestrator relies on would wait in the listen backlog until they
//! time out. The rules:
//!
//! - at most [`Settings::max_connections`] regular connections, and at
//!   most [`Settings::max_connections_per_peer`] of them from one IP;
//! - a connection that would pass a limit takes the slot of the
//!   longest-idle connection it competes with (the peer's own at the
//!   per-peer limit, anyone's at the global one), which is closed: idle
//!   keep-alive connections are reclaimable, requests in progress never
//!   are;
//! - when none is idle, up to [`Settings::probe_headroom`] more
//!   connections are served for `/healthz` and `/readyz` only (one
//!   request each; anything else is `503 too_many_connections`), so the
//!   probes answer while every regular connection is busy;
//! - beyond that, a connection is answered `503 too_many_connections` and
//!   closed at once;
//! - a connection is closed after [`Settings::max_requests_per_connection`]
//!   requests (`Connection: close` on the last answer) or once it is
//!   [`Settings::max_connection_age`] old (after the request in progress),
//!   so no client keeps a slot forever.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use crate::state::Settings;

/// What a connection may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any endpoint.
    Regular,
    /// `/healthz` and `/readyz` only, one request.
    Probe,
}

/// One connection's shared state: the registry reads it to choose whom
/// to evict; the connection's service and task update it.
pub(crate) struct Conn {
    pub kind: Kind,
    peer: IpAddr,
    /// Requests being answered now.
    in_flight: AtomicU32,
    /// When it last became idle, in milliseconds since the registry's
    /// epoch (its accept time until a request finishes).
    idle_since: AtomicU64,
    /// Requests started on it.
    requests: AtomicU64,
    /// Chosen to give its slot up: no longer counted, never chosen again.
    evicted: AtomicBool,
    /// Wakes the connection's task to close it.
    pub close: Notify,
    epoch: Instant,
}

impl Conn {
    fn millis(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request starts; its number on this connection (1 for the first).
    pub fn begin(&self) -> u64 {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        self.requests.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// A request's answer is ready: idle from now if it was the last one.
    pub fn end(&self) {
        self.idle_since.store(self.millis(), Ordering::SeqCst);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// Idle since when, if idle and still counted.
    fn idle(&self) -> Option<u64> {
        let idle =
            self.in_flight.load(Ordering::SeqCst) == 0 && !self.evicted.load(Ordering::SeqCst);
        idle.then(|| self.idle_since.load(Ordering::SeqCst))
    }

    fn counted(&self) -> bool {
        !self.evicted.load(Ordering::SeqCst)
    }
}

/// A request in progress on a connection; [`Conn::end`] when dropped (with
/// the response body, once it has been sent or abandoned).
pub(crate) struct Busy(pub Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// Whether and how an accepted connection is served.
pub(crate) enum Admission {
    /// Served, with its registry entry (removed with [`Registry::leave`]).
    Served(u64, Arc<Conn>),
    /// Answered `503 too_many_connections` and closed.
    Refused,
}

/// The open connections.
pub(crate) struct Registry {
    limits: Limits,
    epoch: Instant,
    inner: Mutex<Open>,
}

#[derive(Clone, Copy)]
struct Limits {
    total: usize,
    per_peer: usize,
    headroom: usize,
}

#[derive(Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, Arc<Conn>>,
}

impl Open {
    fn count(&self, pick: impl Fn(&Conn) -> bool) -> usize {
        self.conns
            .values()
            .filter(|c| c.counted() && pick(c))
            .count()
    }

    /// Marks the longest-idle connection among `pick` evicted and wakes
    /// it; whether there was one.
    fn evict(&self, pick: impl Fn(&Conn) -> bool) -> bool {
        let victim = self
            .conns
            .values()
            .filter(|c| pick(c))
            .filter_map(|c| c.idle().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, c)| Arc::clone(c));
        match victim {
            Some(c) => {
                c.evicted.store(true, Ordering::SeqCst);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Registry {
    pub fn new(settings: &Settings) -> Self {
        Self {
            limits: Limits {
                total: settings.max_connections.max(1),
                per_peer: settings.max_connections_per_peer.max(1),
                headroom: settings.probe_headroom,
            },
            epoch: Instant::now(),
            inner: Mutex::new(Open::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // A panic while holding the lock leaves plain counters behind:
        // keep serving with them.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides the fate of a connection from `peer`.
    pub fn admit(&self, peer: IpAddr) -> Admission {
        let mut open = self.lock();
        let l = self.limits;
        let regular = |c: &Conn| c.kind == Kind::Regular;
        let theirs = |c: &Conn| c.kind == Kind::Regular && c.peer == peer;
        let kind = if open.count(theirs) >= l.per_peer {
            // The peer's own idle connection makes room; another peer's
            // never does.
            open.evict(theirs).then_some(Kind::Regular)
        } else if open.count(regular) >= l.total {
            open.evict(regular).then_some(Kind::Regular)
        } else {
            Some(Kind::Regular)
        };
        let kind = match kind {
            Some(k) => k,
            None => {
                let probe = |c: &Conn| c.kind == Kind::Probe;
                if open.count(probe) < l.headroom || (l.headroom > 0 && open.evict(probe)) {
                    Kind::Probe
                } else {
                    return Admission::Refused;
                }
            }
        };
        open.next += 1;
        let id = open.next;
        let conn = Arc::new(Conn {
            kind,
            peer,
            in_flight: AtomicU32::new(0),
            idle_since: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
            epoch: self.epoch,
        });
        conn.idle_since.store(conn.millis(), Ordering::SeqCst);
        open.conns.insert(id, Arc::clone(&conn));
        Admission::Served(id, conn)
    }

    /// The connection `id` has closed.
    pub fn leave(&self, id: u64) {
        self.lock().conns.remove(&id);
    }

    /// Connections still open (evicted ones until they close included).
    pub fn open(&self) -> usize {
        self.lock().conns.len()
    }

    /// Asks every open connection to close (after its request in
    /// progress).
    pub fn close_all(&self) {
        for c in self.lock().conns.values() {
            c.close.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(total: usize, per_peer: usize, headroom: usize) -> Settings {
        Settings {
            max_connections: total,
            max_connections_per_peer: per_peer,
            probe_headroom: headroom,
            ..Settings::default()
        }
    }

    fn served(a: Admission) -> Arc<Conn> {
        match a {
            Admission::Served(_, c) => c,
            Admission::Refused => panic!("refused"),
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    #[test]
    fn an_idle_connection_gives_its_slot_up_a_busy_one_never_does() {
        let r = Registry::new(&settings(2, 2, 1));
        let first = served(r.admit(A));
        let second = served(r.admit(A));
        second.begin();
        // Full: the idle one is closed for the newcomer.
        let third = served(r.admit(A));
        assert_eq!(third.kind, Kind::Regular);
        assert!(first.evicted.load(Ordering::SeqCst));
        assert!(!second.evicted.load(Ordering::SeqCst));
        // Both remaining are busy: the next one gets the probe headroom,
        // and past it, a refusal.
        third.begin();
        let probe = served(r.admit(B));
        assert_eq!(probe.kind, Kind::Probe);
        probe.begin();
        assert!(matches!(r.admit(B), Admission::Refused));
    }

    #[test]
    fn a_peer_at_its_limit_reclaims_only_its_own_idle_connections() {
        let r = Registry::new(&settings(10, 2, 1));
        let b = served(r.admit(B));
        let a1 = served(r.admit(A));
        let a2 = served(r.admit(A));
        a2.begin();
        served(r.admit(A));
        assert!(a1.evicted.load(Ordering::SeqCst));
        assert!(
            !b.evicted.load(Ordering::SeqCst),
            "another peer's connection was closed"
        );
    }
}
