//! The LoggedStore level (RELIABLE + DURABILITY PERSISTENT) on the DCPS side: which
//! messages a participant logs, where, what it recovers from its logs when it starts, and
//! which samples are durable everywhere.
//!
//! **Where.** A participant with a `data_dir` ([`crate::ParticipantConfig::data_dir`], env
//! `SPINDLE_DATA_DIR`) logs every topic subgroup it is a member of, each in its own
//! subdirectory `<data_dir>/subgroup-<id>`, beside the log of installed views
//! (`<data_dir>/views`); the engine's second stage does the work
//! ([`spindle_group::persist`]): deliveries are appended in delivery order, synced once per
//! pass of the predicate loop (group commit), and the durable prefix is published as the
//! member's `persisted_num`. Only samples offered at the LoggedStore level are appended
//! (topics of other levels may share the subgroup); the others count as durable at once.
//! Every member of a subgroup that carries a PERSISTENT topic must have a `data_dir`: one
//! that has none never reports, and the subgroup's frontier does not move.
//!
//! **Durable everywhere.** The global persistence frontier of a subgroup in view `v` (the
//! minimum of its members' `persisted_num`) reaches the delivery path as
//! [`spindle_group::persist::PersistedFrontier`]; [`Durable`] keeps it per view. A sample
//! delivered at `(v, i)` is durable everywhere once `i` is below `v`'s frontier (every
//! member of the subgroup in view `v` holds it in its synced log), or once a later view's
//! frontier moved and the subgroup was continuously held since `v`: each member logged
//! `v`'s deliveries, or the history shipped to it when it entered, in order, before the
//! later ones it synced. A writer whose last sample was delivered in an earlier view than
//! the current one sends a header-only *nudge* ([`NUDGE_TOPIC_ID`]) so that the current
//! view's frontier moves even with no other traffic.
//! [`crate::SampleInfo::durable`] says it for each sample of a LoggedStore reader, and
//! [`crate::DataWriter::wait_for_acknowledgments`] waits for it.
//!
//! **Restart after total failure.** A participant that is one of several bootstrap
//! members and whose logs hold a view runs [`spindle_group::restart`] before its group
//! exists (the leader is the lowest bootstrap member; it waits, saying how many of the last
//! view are back, up to `entity_timeout_ms`), then bootstraps in the view the leader chose
//! with its logs brought to the restored state. A member the leader's plan leaves out (it
//! reported after the decision), or whose restart times out, joins the domain through its
//! contacts instead, as a new member: the join succeeds only if the domain runs, and the
//! state transfer cuts from its log what the domain went on without (module
//! [`spindle_group::persist`]). A single bootstrap member has no majority
//! to ask and begins above its own last logged view (so does every simulated participant).
//!
//! **Retention.** A PERSISTENT writer's DURABILITY_SERVICE `max_samples` and LIFESPAN bound
//! its subgroup's log ([`retention_of`], [`widen_retention`]); whole old segments go.
//!
//! **Recovery.** When a participant starts, its logs are read back (`read_back`): the samples
//! they hold become the participant's store of that subgroup when it enters the subgroup
//! and nobody holds one (the domain restarted), or are merged into the store a member
//! ships it (each sample once, by its place in the order). A late reader of a PERSISTENT
//! topic is primed from that store, up to its HISTORY depth: it gets the durable history
//! from the log, not only what this process delivered.

use std::collections::BTreeMap;

use spindle_group::persist::{Persistence, Persister, Retention, RetentionHandle};
use spindle_group::restart::RestartConfig;
use spindle_group::SubgroupId;
use spindle_log::{EntryMeta, LogConfig, Version};
use spindle_qos::DeliveryLevel;

use crate::cache::Origin;
use crate::config::ParticipantConfig;
use crate::error::{Error, Result};
use crate::sample::SampleHeader;
use crate::store::Store;

/// Views whose frontier [`Durable`] remembers per subgroup (the oldest go first; their
/// samples stay durable through the later-view rule while the membership is unchanged).
pub const FRONTIER_VIEWS_MAX: usize = 64;

/// The topic id of a *nudge*: a header-only message a writer waiting for acknowledgment
/// sends when its last sample was delivered in an earlier view and the current view has
/// seen no traffic. Every member's `persisted_num` in the current view then moves (the
/// nudge counts without being logged, and a member reports it only after syncing all it
/// logged before), which vouches for the earlier views' samples (see [`Durable`]).
/// Readers, stores and logs ignore it.
pub const NUDGE_TOPIC_ID: u64 = 0;

/// The bytes of a nudge (see [`NUDGE_TOPIC_ID`]).
pub fn nudge() -> [u8; crate::sample::SAMPLE_HEADER_BYTES] {
    let h = SampleHeader {
        kind: crate::sample::SampleKind::Data,
        writer_id: u32::MAX,
        topic_id: NUDGE_TOPIC_ID,
        writer_seq: 0,
        source_timestamp_ns: 0,
        key_hash: Default::default(),
        lifespan_ns: 0,
        ownership_strength: 0,
        level: DeliveryLevel::LoggedStore,
        partition_tag: 0,
        coherent: crate::sample::Coherent::No,
    };
    let mut b = [0u8; crate::sample::SAMPLE_HEADER_BYTES];
    h.encode(&mut b);
    b
}

/// True if a delivered message is a sample offered at the LoggedStore level (not a
/// nudge, nor a writer's control message — a LIVELINESS assertion, a coherent set's
/// end): the only messages a logged subgroup appends.
pub fn is_logged(payload: &[u8]) -> bool {
    SampleHeader::decode(payload).is_ok_and(|(h, _)| {
        h.level == DeliveryLevel::LoggedStore
            && h.topic_id != NUDGE_TOPIC_ID
            && !matches!(
                h.kind,
                crate::sample::SampleKind::Liveliness
                    | crate::sample::SampleKind::CoherentEnd
                    | crate::sample::SampleKind::GroupCoherentEnd
            )
    })
}

/// A logged message's timestamp: the sample's source timestamp in µs (the sender's clock).
pub fn timestamp_us(payload: &[u8]) -> u64 {
    SampleHeader::decode(payload).map_or(0, |(h, _)| (h.source_timestamp_ns.max(0) / 1_000) as u64)
}

/// The logged samples of a store snapshot (a state transfer): a member that enters a
/// subgroup logs the history the others delivered before (bounded as the store is). A
/// snapshot that does not decode is an error naming what is wrong with it: the log keeps
/// what it holds (an empty list would cut it).
pub fn snapshot_entries(state: &[u8]) -> std::result::Result<Vec<(EntryMeta, Vec<u8>)>, String> {
    let store = Store::from_snapshot(state, 0)
        .map_err(|e| format!("a store snapshot of {} bytes: {e}", state.len()))?;
    Ok(store
        .iter()
        .filter(|s| is_logged(&s.bytes))
        .map(|s| {
            let meta = EntryMeta {
                version: Version::new(u64::from(s.origin.view_id), s.origin.order_index),
                writer: u64::from(s.origin.node),
                timestamp_us: timestamp_us(&s.bytes),
            };
            (meta, s.bytes.clone())
        })
        .collect())
}

/// The persistence of a participant configured with a `data_dir`: every topic subgroup
/// `0..topic_subgroups`, only LoggedStore samples; state transfers logged too.
pub fn persistence(config: &ParticipantConfig) -> Option<Persistence> {
    let dir = config.data_dir.as_ref()?;
    let mut p = Persistence::new(dir)
        .timestamps(timestamp_us)
        .keeping(is_logged)
        .state_entries(snapshot_entries);
    for sg in 0..config.topic_subgroups {
        p = p.subgroup(sg, LogConfig::default());
    }
    Some(p)
}

/// The logs of a participant configured with a `data_dir`, opened (created, or
/// recovered: a torn tail is cut, corruption is an error naming file and offset), and the
/// last view they logged, if any. `None` without a `data_dir`.
pub(crate) fn open_logs(config: &ParticipantConfig) -> Result<Option<(Persister, Option<u32>)>> {
    let Some(p) = persistence(config) else {
        return Ok(None);
    };
    let what =
        |e: spindle_group::Error| Error::Config(format!("data_dir {}: {e}", p.dir.display()));
    let mut persister = p.open().map_err(what)?;
    let last_vid = persister.last_view().map_err(what)?.map(|v| v.vid);
    Ok(Some((persister, last_vid)))
}

/// Whether a participant whose logs hold a view restarts the domain with the others
/// ([`spindle_group::restart`]): it is one of several bootstrap members. A single
/// bootstrap member has no majority to ask and begins above its own last logged view; a
/// member that joins through contacts joins the running domain.
pub(crate) fn restarts(config: &ParticipantConfig, last_vid: Option<u32>) -> bool {
    last_vid.is_some() && config.bootstrap.len() > 1 && config.bootstrap.contains(&config.node_id)
}

/// Whether a participant whose restart ended without it ([`spindle_group::Error::Restart`]:
/// the leader's plan leaves it out, or nobody answered in time) may join the domain as a
/// new member instead: it has someone other than itself to join through.
pub(crate) fn may_join(config: &ParticipantConfig) -> bool {
    config.contacts.iter().any(|c| c.node != config.node_id)
}

/// How long a restart leader waits for the rest of the last view once a majority is back
/// (a member that starts later than this is left out of the restarted view, and its
/// restart fails with an error saying so when `entity_timeout_ms` passes).
pub const RESTART_GRACE_US: u64 = 10_000_000;

/// The restart settings of a participant: the leader is the lowest bootstrap member; the
/// restart may take the entity time-out.
pub(crate) fn restart_config(
    config: &ParticipantConfig,
    own_address: &str,
) -> Result<RestartConfig> {
    let leader = config
        .bootstrap
        .iter()
        .copied()
        .min()
        .unwrap_or(config.node_id);
    let leader_address = if leader == config.node_id {
        own_address.to_string()
    } else {
        config
            .contacts
            .iter()
            .find(|c| c.node == leader)
            .map(|c| c.address.clone())
            .ok_or_else(|| {
                Error::Config(format!(
                    "the restart leader, bootstrap member {leader}, has no entry in contacts"
                ))
            })?
    };
    Ok(RestartConfig {
        leader,
        leader_address,
        grace_us: RESTART_GRACE_US,
        timeout: std::time::Duration::from_millis(config.entity_timeout_ms),
        group_id: crate::declare::group_id(config.domain_id, crate::declare::WIRE_VERSION),
        group_label: crate::declare::group_label,
    })
}

/// Reads every logged subgroup's samples back (each subgroup's store when the participant
/// enters it; see the module docs).
pub(crate) fn read_back(persister: &mut Persister) -> Result<BTreeMap<SubgroupId, Store>> {
    let what = |e: spindle_log::LogError| Error::Config(format!("reading a log back: {e}"));
    let mut stores = BTreeMap::new();
    let ids: Vec<SubgroupId> = persister.subgroups().collect();
    for sg in ids {
        let Some(log) = persister.log_mut(sg) else {
            continue;
        };
        if log.is_empty() {
            continue;
        }
        let mut store = Store::default();
        for e in log.range(..).map_err(what)? {
            let e = e.map_err(what)?;
            let (Ok((h, _)), Ok(view_id)) = (
                SampleHeader::decode(&e.payload),
                u32::try_from(e.meta.version.view_id),
            ) else {
                tracing::warn!(subgroup = sg, version = %e.meta.version, "logged entry is no sample; skipped");
                continue;
            };
            let origin = Origin {
                node: u32::try_from(e.meta.writer).unwrap_or(u32::MAX),
                view_id,
                order_index: e.meta.version.order_index,
            };
            store.push(&h, origin, &e.payload, 0);
        }
        stores.insert(sg, store);
    }
    Ok(stores)
}

/// The retention a PERSISTENT writer's QoS asks of its subgroup's log: DURABILITY_SERVICE
/// `max_samples` (if not unlimited) bounds the entries, LIFESPAN (if finite) their age.
/// The log is shared by the subgroup's topics and cut by whole segments, so a per-instance
/// `history_depth` cannot be kept in it: that bound is the in-memory store's.
pub fn retention_of(qos: &spindle_qos::DataWriterQos) -> Retention {
    let max = qos.durability_service.max_samples;
    Retention {
        entries_max: (max > 0).then_some(max as u64),
        age_max_us: qos
            .lifespan
            .duration
            .to_std()
            .map(crate::common::saturating_us),
    }
}

/// Widens subgroup `sg`'s retention in `handle` to keep at least what `r` keeps: the
/// loosest of every PERSISTENT writer this participant created on the subgroup (`None`,
/// keep all, wins). Never narrowed, so no writer's history is cut short.
pub fn widen_retention(handle: &RetentionHandle, sg: SubgroupId, r: Retention) {
    let mut map = handle.lock().unwrap_or_else(|p| p.into_inner());
    let loosest = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.max(b));
    map.entry(sg)
        .and_modify(|e| {
            e.entries_max = loosest(e.entries_max, r.entries_max);
            e.age_max_us = loosest(e.age_max_us, r.age_max_us);
        })
        .or_insert(r);
}

/// One subgroup's global persistence frontiers, as the delivery path learns them. See the
/// module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durable {
    /// Per view, the frontier last seen: every message of that view's order below it is
    /// in every member's synced log.
    frontiers: BTreeMap<u32, u64>,
    /// The first view since which every member of the subgroup now was a member of it.
    since: u32,
}

/// `view 3 below 120, view 4 below 7 (since view 2)`: what an error says of the frontiers.
impl std::fmt::Display for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.frontiers.is_empty() {
            write!(f, "none")?;
        }
        for (i, (vid, num)) in self.frontiers.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}view {vid} below {num}")?;
        }
        write!(f, " (since view {})", self.since)
    }
}

impl Durable {
    /// The frontier of `vid` moved to `num`.
    pub fn moved(&mut self, vid: u32, num: u64) {
        let f = self.frontiers.entry(vid).or_default();
        *f = (*f).max(num);
        while self.frontiers.len() > FRONTIER_VIEWS_MAX {
            self.frontiers.pop_first();
        }
    }

    /// A view installed in which the subgroup's members are `now`; `before` were its
    /// members in the previous view (empty: it did not exist). A member that enters a
    /// subgroup someone held logs the history shipped to it before anything of the new
    /// view ([`snapshot_entries`]), so the later frontiers vouch for the earlier views;
    /// only a subgroup that no member kept starts over.
    pub fn view_installed(&mut self, vid: u32, before: &[u32], now: &[u32]) {
        if !now.iter().any(|m| before.contains(m)) {
            self.since = vid;
        }
    }

    /// True if the message delivered at `(view_id, order_index)` is durable everywhere.
    pub fn covers(&self, view_id: u32, order_index: u64) -> bool {
        if self
            .frontiers
            .get(&view_id)
            .is_some_and(|f| order_index < *f)
        {
            return true;
        }
        self.since <= view_id
            && self
                .frontiers
                .last_key_value()
                .is_some_and(|(v, f)| *v > view_id && *f > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store snapshot of `n` logged samples of one writer, delivered in view 1.
    fn logged_snapshot(n: u64) -> Vec<u8> {
        let mut store = Store::default();
        for seq in 1..=n {
            let h = SampleHeader {
                kind: crate::sample::SampleKind::Data,
                writer_id: 1,
                topic_id: 4,
                writer_seq: seq,
                source_timestamp_ns: 1_000,
                key_hash: spindle_topics::KeyHash([7; 16]),
                lifespan_ns: 0,
                ownership_strength: 0,
                partition_tag: 0,
                coherent: crate::sample::Coherent::No,
                level: DeliveryLevel::LoggedStore,
            };
            let mut bytes = vec![0u8; crate::sample::SAMPLE_HEADER_BYTES + 8];
            let mut head = [0u8; crate::sample::SAMPLE_HEADER_BYTES];
            h.encode(&mut head);
            bytes[..head.len()].copy_from_slice(&head);
            let origin = Origin {
                node: 1,
                view_id: 1,
                order_index: seq,
            };
            store.push(&h, origin, &bytes, 0);
        }
        store.snapshot()
    }

    #[test]
    fn a_state_transfer_that_does_not_decode_leaves_the_log_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = ParticipantConfig::new(1, crate::config::Transport::Tcp, "127.0.0.1:0");
        cfg.data_dir = Some(dir.path().to_path_buf());
        cfg.topic_subgroups = 1;
        let mut persister = persistence(&cfg).unwrap().open().unwrap();
        let install = |p: &mut Persister, state: Vec<u8>| {
            p.record(&spindle_group::GroupOutput::InstallState { subgroup: 0, state })
                .unwrap();
            p.log(0).unwrap().len()
        };
        assert_eq!(
            install(&mut persister, logged_snapshot(3)),
            3,
            "a good state is logged"
        );
        // A peer's state whose bytes do not decode (cut short, then garbage).
        let mut bad = logged_snapshot(3);
        bad.truncate(bad.len() / 2);
        assert_eq!(
            install(&mut persister, bad),
            3,
            "a truncated state cuts nothing"
        );
        assert_eq!(
            install(&mut persister, vec![0xAB; 100]),
            3,
            "garbage cuts nothing"
        );
        // A good, empty state still means the domain holds none of it.
        assert_eq!(install(&mut persister, logged_snapshot(0)), 0);
    }

    #[test]
    fn frontiers_cover_their_view_and_earlier_views_of_the_same_members() {
        let mut d = Durable::default();
        d.view_installed(3, &[], &[1, 2]);
        assert!(!d.covers(3, 0));
        assert_eq!(d.to_string(), "none (since view 3)");
        d.moved(3, 5);
        assert!(d.covers(3, 4) && !d.covers(3, 5));
        assert_eq!(d.to_string(), "view 3 below 5 (since view 3)");
        // A member left: the later view vouches for view 3's tail.
        d.view_installed(4, &[1, 2], &[1]);
        assert!(!d.covers(3, 7));
        d.moved(4, 1);
        assert!(d.covers(3, 7) && d.covers(4, 0) && !d.covers(4, 1));
        // A member entered: it logged the history shipped to it, so view 5's frontier
        // vouches for views 3 and 4 too.
        d.view_installed(5, &[1], &[1, 3]);
        assert!(!d.covers(4, 1));
        d.moved(5, 2);
        assert!(d.covers(5, 1) && d.covers(3, 4) && d.covers(4, 1));
        // Nobody kept the subgroup: the new members' logs lack the old views.
        d.view_installed(6, &[1, 3], &[4]);
        d.moved(6, 1);
        assert!(
            d.covers(6, 0) && d.covers(5, 1),
            "known before, still known"
        );
        assert!(!d.covers(5, 2), "not in the new member's log");
        for v in 6..200 {
            d.moved(v, 1);
        }
        assert!(d.frontiers.len() <= FRONTIER_VIEWS_MAX);
    }

    #[test]
    fn retention_widens_to_the_loosest_writer() {
        let h = RetentionHandle::default();
        let r = |n: Option<u64>, a: Option<u64>| Retention {
            entries_max: n,
            age_max_us: a,
        };
        widen_retention(&h, 1, r(Some(10), Some(5)));
        widen_retention(&h, 1, r(Some(20), Some(2)));
        assert_eq!(h.lock().unwrap()[&1], r(Some(20), Some(5)));
        widen_retention(&h, 1, r(None, Some(1)));
        assert_eq!(h.lock().unwrap()[&1], r(None, Some(5)));
        let mut q = spindle_qos::DataWriterQos::default();
        assert_eq!(retention_of(&q), r(None, None));
        q.durability_service.max_samples = 100;
        q.lifespan.duration = spindle_qos::Duration::from_millis(3);
        assert_eq!(retention_of(&q), r(Some(100), Some(3_000)));
    }

    #[test]
    fn only_logged_store_samples_are_logged() {
        use crate::sample::{SampleKind, SAMPLE_HEADER_BYTES};
        let mut h = SampleHeader {
            kind: SampleKind::Data,
            writer_id: 1,
            topic_id: 2,
            writer_seq: 1,
            source_timestamp_ns: 5_000,
            key_hash: Default::default(),
            lifespan_ns: 0,
            ownership_strength: 0,
            level: DeliveryLevel::LoggedStore,
            partition_tag: 0,
            coherent: crate::sample::Coherent::No,
        };
        let mut b = [0u8; SAMPLE_HEADER_BYTES];
        h.encode(&mut b);
        assert!(is_logged(&b));
        // A writer's control messages are not logged.
        let liveliness = SampleHeader {
            kind: SampleKind::Liveliness,
            ..h
        };
        let mut c = [0u8; SAMPLE_HEADER_BYTES];
        liveliness.encode(&mut c);
        assert!(!is_logged(&c));
        assert_eq!(timestamp_us(&b), 5);
        h.level = DeliveryLevel::VolatileStore;
        h.encode(&mut b);
        assert!(!is_logged(&b));
        assert!(!is_logged(b"garbage"));
        assert!(!is_logged(&nudge()), "a nudge counts, but is not logged");
        assert_eq!(timestamp_us(b"garbage"), 0);
    }
}
