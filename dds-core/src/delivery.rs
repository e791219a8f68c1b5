//! The delivery path: the only place engine output enters DCPS.
//!
//! [`DdsApp`] is the participant's [`Application`]: the group hands it delivery batches,
//! views, state transfers and its stop, in order, and it routes samples into readers'
//! caches and the stores, turns views into matched statuses and fires listeners.
//! [`handle_timeout`] is the other input: the passing of time (DEADLINE). Both are
//! sans-IO — they change the shared state and call listeners, nothing else — so the
//! predicate thread (`threads.rs`) and the simulation (`sim.rs`) drive the same code.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use spindle_group::persist::PersistedFrontier;
use spindle_group::runtime::Application;
use spindle_group::{DeliveryBatch, SubgroupId, ViewInstalled};
use spindle_qos::{partitions_match, DeliveryLevel, LivelinessKind, QosPolicyId};
use spindle_transport_rdma::NodeId;

use crate::cache::Origin;
use crate::common::{lock, set_delivery_thread};
use crate::condition::notify_all;
use crate::declare::{dds_subgroups, BUILTIN_SUBGROUP};
use crate::discovery::{self, Endpoint, EndpointKey, Mismatch};
use crate::lent::LentBatch;
use crate::reader_core::ReaderCore;
use crate::sample::{SampleHeader, SampleKind, WriterHandle};
use crate::shared::{Ignore, Ignored, Shared, State};
use crate::status::StatusMask;
use crate::store::Store;
use crate::writer_core::WriterCore;

/// The application the engine delivers to: routes samples to readers' caches and the
/// volatile stores, and turns views into matched statuses. It runs on the participant's
/// delivery thread, or inside a round of the simulated domain (`sim::SimDomain`).
pub struct DdsApp {
    shared: Arc<Shared>,
    /// Readers that got samples this round: their listeners run, and WaitSets wake, once
    /// at the end of the round ([`Application::round_end`]), however many subgroups'
    /// batches it delivered.
    data_available: Vec<Arc<ReaderCore>>,
    /// Readers that lost held samples this round (SAMPLE_LOST), told at its end too.
    sample_lost: Vec<Arc<ReaderCore>>,
}

impl std::fmt::Debug for DdsApp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DdsApp")
            .field("node", &self.shared.me)
            .finish()
    }
}

impl DdsApp {
    /// The application of the participant whose shared state is `shared`.
    pub(crate) fn new(shared: Arc<Shared>) -> DdsApp {
        DdsApp {
            shared,
            data_available: Vec::new(),
            sample_lost: Vec::new(),
        }
    }

    fn listeners(readers: Vec<Arc<ReaderCore>>, mask: StatusMask) {
        for r in readers {
            r.fire(mask);
        }
    }

    /// Routes one delivered batch to the readers of its topics and the stores; with
    /// `lent`, the batch itself lent to the readers (their caches borrow its bytes).
    fn route(&mut self, batch: &DeliveryBatch, lent: Option<&Arc<LentBatch>>) {
        set_delivery_thread(true);
        let sg = batch.subgroup();
        let mut got: Vec<Arc<ReaderCore>> = Vec::new();
        let mut lost: Vec<Arc<ReaderCore>> = Vec::new();
        let mut revived: Vec<(Arc<ReaderCore>, StatusMask)> = Vec::new();
        let mut announced = BTreeSet::new();
        let rematched;
        let me = self.shared.me;
        let mut own = false;
        // A GROUP coherent set's end in the batch: it reaches every topic's readers.
        let mut group_end = false;
        {
            let mut st = lock(&self.shared.state);
            let vid = st.view.as_ref().map_or(0, |v| v.vid);
            let (keeps, depth) = st
                .subgroups
                .get(&sg)
                .map_or((false, 0), |d| (d.level.keeps_history(), d.store_depth));
            // Allocated at its first sample: a batch of this participant's own samples
            // handed over as headers only (a publisher's) needs none.
            let mut items = Vec::new();
            // Samples handed over as their header only, by writer, and their bytes.
            let mut cut: Vec<WriterHandle> = Vec::new();
            let mut cut_bytes = 0;
            // This participant's writer whose samples the batch is in the middle of, and
            // where the last of them landed (recorded when the run ends).
            let mut own_run: Option<(u32, (u64, u32, u64))> = None;
            for m in batch.iter() {
                let (h, payload) = match SampleHeader::decode(m.payload) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(subgroup = sg, sender = m.sender, error = %e, "message dropped");
                        continue;
                    }
                };
                if h.topic_id == crate::logged::NUDGE_TOPIC_ID {
                    continue; // only moves the persistence frontier
                }
                let origin = Origin {
                    node: m.sender,
                    view_id: vid,
                    order_index: m.global_index,
                };
                if m.sender == me {
                    // Where this participant's writer's sample landed in the order
                    // (`wait_for_acknowledgments` waits for it to be durable): the last
                    // of each run of one writer's samples is recorded, not every one.
                    if let Some((w, at)) = own_run.filter(|(w, _)| *w != h.writer_id) {
                        st.own_delivered.insert(w, at);
                    }
                    own_run = Some((h.writer_id, (h.writer_seq, vid, m.global_index)));
                    own = true;
                }
                if m.payload.len() < m.full_len {
                    // Cut to its header by the view's delivery prefix: this participant
                    // reads none of the subgroup's topics in this view (a reader being
                    // created now counts from the view that declares it). A store-level
                    // or built-in subgroup is never cut.
                    cut.push(h.writer(m.sender));
                    cut_bytes += m.full_len;
                    continue;
                }
                if h.kind == SampleKind::GroupCoherentEnd {
                    if let Err(e) = crate::sample::decode_group_end(payload) {
                        tracing::warn!(subgroup = sg, sender = m.sender, error = %e, "message dropped");
                        continue;
                    }
                    group_end = true;
                }
                // A GROUP set's end goes to the store whatever its writer's level: the
                // set may hold samples of writers of other levels.
                if keeps
                    && (h.level.keeps_history() || h.kind == SampleKind::GroupCoherentEnd)
                    && h.kind != SampleKind::Liveliness
                {
                    st.stores
                        .entry(sg)
                        .or_default()
                        .push(&h, origin, m.payload, depth);
                }
                if sg == BUILTIN_SUBGROUP {
                    apply_announcement(&mut st, m.sender, m.payload, &mut announced);
                    continue;
                }
                if items.is_empty() {
                    items.reserve(batch.len());
                }
                items.push((h, payload, origin));
            }
            if let Some((w, at)) = own_run {
                st.own_delivered.insert(w, at);
            }
            // One lock of each reader's cache per batch, per topic in it.
            let mut topics: Vec<u64> = items.iter().map(|(h, _, _)| h.topic_id).collect();
            if group_end {
                // Every reader of the subgroup holds its part of the set, whatever topic.
                topics.extend(
                    st.readers
                        .iter()
                        .filter(|(_, rs)| rs.iter().any(|r| r.subgroup == sg))
                        .map(|(t, _)| *t),
                );
            }
            topics.sort_unstable();
            topics.dedup();
            if self.shared.leases_watched.load(Ordering::Acquire)
                && !(items.is_empty() && cut.is_empty())
            {
                // Every sample or assertion of a writer renews its LIVELINESS lease, and
                // under MANUAL_BY_PARTICIPANT those of its participant's writers.
                let mut heard: Vec<WriterHandle> = items
                    .iter()
                    .map(|(h, _, o)| h.writer(o.node))
                    .chain(cut.iter().copied())
                    .collect();
                heard.sort_unstable();
                heard.dedup();
                let now_us = self.shared.clock.now_us();
                for r in st.readers.values().flatten().filter(|r| r.has_leases()) {
                    let m = r.heard_from(&heard, now_us);
                    if m != StatusMask::NONE {
                        revived.push((Arc::clone(r), m));
                    }
                }
            }
            let mut unread = 0;
            for t in topics {
                let Some(rs) = st.readers.get(&t) else {
                    unread += items.iter().filter(|(h, _, _)| h.topic_id == t).count();
                    continue;
                };
                for r in rs.iter().filter(|r| r.subgroup == sg && r.is_member()) {
                    // Only its topic's samples, offered at the level it requests (RxO),
                    // in a partition it matches, judged once the table names their
                    // writer (`crate::held`).
                    let mine = items
                        .iter()
                        .filter(|(h, _, _)| {
                            // A GROUP set's end ends only the sets this reader holds.
                            h.kind == SampleKind::GroupCoherentEnd
                                || (h.topic_id == t && h.level >= r.level)
                        })
                        .map(|(h, p, o)| (h, *p, *o));
                    let heard = r.route(mine, &|w, tag| st.judging(w, tag), lent);
                    sort_out(r, heard, &mut got, &mut lost);
                }
            }
            let bytes: usize = items
                .iter()
                .map(|(_, p, _)| p.len() + crate::sample::SAMPLE_HEADER_BYTES)
                .sum();
            self.shared.counters.received(
                items.len() + cut.len(),
                bytes + cut_bytes,
                unread + cut.len(),
            );
            rematched = if announced.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                rematch_local(&st, Some(&announced), &self.shared)
            };
            if !announced.is_empty() {
                // Samples held back for a writer announced just now (`crate::held`).
                for r in st.readers.values().flatten() {
                    let heard = r.release_held(&|w, tag| st.judging(w, tag), false);
                    sort_out(r, heard, &mut got, &mut lost);
                }
            }
        }
        if !announced.is_empty() || !revived.is_empty() {
            // Matched statuses may have changed: StatusConditions wake now (rare).
            self.shared.view_changed.notify_all();
            notify_all();
        } else if own && self.shared.ack_waiters.load(Ordering::Acquire) > 0 {
            self.shared.view_changed.notify_all();
        }
        self.data_available.extend(got);
        self.sample_lost.extend(lost);
        fire(rematched);
        fire((revived, Vec::new()));
    }
}

impl Application for DdsApp {
    fn deliver(&mut self, batch: &DeliveryBatch) {
        self.route(batch, None);
    }

    /// Lends the batch to the readers that keep its samples (no copy into their caches),
    /// within [`crate::lent::LENT_BYTES_MAX`]; gives the engine back this batch if nobody
    /// kept a sample of it, else one the readers are done with, if any. Large samples
    /// are lent in place until the engine wants their buffers back
    /// ([`Application::pins_wanted`]).
    fn deliver_owned(&mut self, batch: DeliveryBatch) -> Option<DeliveryBatch> {
        if batch.subgroup() == BUILTIN_SUBGROUP {
            self.route(&batch, None);
            return Some(batch);
        }
        match self.shared.lent.lend(batch) {
            Err(batch) => {
                self.route(&batch, None);
                Some(batch)
            }
            Ok(lent) => {
                self.route(lent.batch(), Some(&lent));
                match Arc::try_unwrap(lent) {
                    Ok(lent) => Some(lent.into_batch()),
                    Err(held) => {
                        drop(held);
                        self.shared.lent.spare()
                    }
                }
            }
        }
    }

    /// Copies out every sample of `subgroup` a reader's cache holds in place in an RDMC
    /// buffer, so that the buffers go back to their writers (loans the application holds
    /// keep theirs until dropped).
    fn pins_wanted(&mut self, subgroup: SubgroupId) {
        let st = lock(&self.shared.state);
        for r in st
            .readers
            .values()
            .flatten()
            .filter(|r| r.subgroup == subgroup)
        {
            let copied = lock(&r.cache).copy_in_place();
            tracing::trace!(subgroup, copied, "in-place samples copied out");
        }
    }

    fn round_end(&mut self) {
        if !self.sample_lost.is_empty() {
            let mut lost = std::mem::take(&mut self.sample_lost);
            lost.sort_unstable_by_key(Arc::as_ptr);
            lost.dedup_by(|a, b| Arc::ptr_eq(a, b));
            notify_all();
            DdsApp::listeners(lost, StatusMask::SAMPLE_LOST);
        }
        if self.data_available.is_empty() {
            return;
        }
        let mut got = std::mem::take(&mut self.data_available);
        got.sort_unstable_by_key(Arc::as_ptr);
        got.dedup_by(|a, b| Arc::ptr_eq(a, b));
        notify_all();
        DdsApp::listeners(got, StatusMask::DATA_AVAILABLE);
    }

    fn view_installed(&mut self, v: &ViewInstalled) {
        set_delivery_thread(true);
        let me = self.shared.me;
        if std::env::var_os("SPINDLE_DDS_DEBUG").is_some() {
            eprintln!(
                "node {me}: view {} members {:?} declared {:?} layout {:?} inadequate {:?}",
                v.view.vid,
                v.view.members,
                v.view.declared.keys().collect::<Vec<_>>(),
                v.layout.as_ref().map(|l| l
                    .subgroups
                    .iter()
                    .map(|s| (s.id, s.members.clone(), s.senders.clone()))
                    .collect::<Vec<_>>()),
                v.inadequate
            );
        }
        let rematched;
        let mut primed = Vec::new();
        let mut lost = Vec::new();
        {
            let mut st = lock(&self.shared.state);
            let view = v.view.clone();
            let previous = std::mem::take(&mut st.subgroups);
            st.subgroups = if v.layout.is_some() {
                dds_subgroups(&view)
                    .into_iter()
                    .map(|s| (s.spec.id, s))
                    .collect()
            } else {
                BTreeMap::new()
            };
            // A store-level subgroup this node enters gets its state from a member that
            // held it in the last view (the engine's state transfer); one nobody held
            // starts empty.
            let mut awaiting = Vec::new();
            for d in st.subgroups.values() {
                let sg = d.spec.id;
                if !d.level.keeps_history() || !d.spec.members.contains(&me) {
                    continue;
                }
                let was_in = previous
                    .get(&sg)
                    .is_some_and(|p| p.spec.members.contains(&me));
                let holder = previous.get(&sg).is_some_and(|p| {
                    p.spec
                        .members
                        .iter()
                        .any(|m| *m != me && d.spec.members.contains(m))
                });
                if !was_in && holder {
                    awaiting.push(sg);
                }
            }
            st.awaiting_state.extend(awaiting);
            // Stores: kept for store-level subgroups this node is in; a node that newly
            // enters one gets its store by state transfer before any delivery.
            let mine: Vec<(SubgroupId, bool)> = st
                .subgroups
                .values()
                .filter(|s| s.spec.members.contains(&me))
                .map(|s| (s.spec.id, s.level.keeps_history()))
                .collect();
            st.stores
                .retain(|sg, _| mine.iter().any(|(m, keeps)| m == sg && *keeps));
            st.awaiting_state
                .retain(|sg| mine.iter().any(|(m, _)| m == sg));
            for (sg, keeps) in &mine {
                if *keeps && !st.awaiting_state.contains(sg) && !st.stores.contains_key(sg) {
                    // Nobody holds the subgroup's store: it starts from what this
                    // participant's log recovered (a restarted domain), or empty.
                    let store = match st.recovered.remove(sg) {
                        Some(r) => {
                            let depth = st.subgroups.get(sg).map_or(0, |d| d.store_depth);
                            Store::merged(&r, &Store::default(), depth)
                        }
                        None => Store::default(),
                    };
                    primed.extend(prime_readers(&st, *sg, &store));
                    st.stores.insert(*sg, store);
                }
            }
            {
                let st = &mut *st;
                for d in st.subgroups.values() {
                    let before: &[NodeId] = previous
                        .get(&d.spec.id)
                        .map_or(&[], |p| p.spec.members.as_slice());
                    st.durable.entry(d.spec.id).or_default().view_installed(
                        view.vid,
                        before,
                        &d.spec.members,
                    );
                }
            }
            // The old view delivered all it will: what is still held back for a writer
            // the table never named is judged now, before the view's changes apply.
            for r in st.readers.values().flatten() {
                let heard = r.release_held(&|w, tag| st.judging(w, tag), true);
                sort_out(r, heard, &mut primed, &mut lost);
            }
            let gone = |w: &WriterHandle| !view.members.contains(&w.node);
            for rs in st.readers.values() {
                for r in rs {
                    let member = st
                        .subgroups
                        .get(&r.subgroup)
                        .is_some_and(|d| d.spec.members.contains(&me));
                    if r.set_member(member, &gone) {
                        primed.push(Arc::clone(r));
                    }
                }
            }
            // Endpoints of participants that left the view are gone with them.
            st.endpoints
                .retain(|(node, _), _| view.members.contains(node));
            st.gone.retain_nodes(&view.members);
            st.former.retain_nodes(&view.members);
            st.view = Some(view);
            rematched = rematch_local(&st, None, &self.shared);
        }
        self.shared.view_changed.notify_all();
        notify_all();
        DdsApp::listeners(primed, StatusMask::DATA_AVAILABLE);
        DdsApp::listeners(lost, StatusMask::SAMPLE_LOST);
        fire(rematched);
    }

    fn persisted(&mut self, f: &PersistedFrontier) {
        lock(&self.shared.state)
            .durable
            .entry(f.subgroup)
            .or_default()
            .moved(f.vid, f.global_persisted_num);
        if self.shared.ack_waiters.load(Ordering::Acquire) > 0 {
            self.shared.view_changed.notify_all();
        }
    }

    fn snapshot(&mut self, subgroup: SubgroupId) -> Vec<u8> {
        lock(&self.shared.state)
            .stores
            .get(&subgroup)
            .map(|s| s.snapshot())
            .unwrap_or_default()
    }

    fn install(&mut self, subgroup: SubgroupId, state: &[u8]) {
        let mut got = Vec::new();
        let mut lost = Vec::new();
        let rematched;
        {
            let mut st = lock(&self.shared.state);
            let depth = st.subgroups.get(&subgroup).map_or(0, |d| d.store_depth);
            let mut store = match Store::from_snapshot(state, depth) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(subgroup, error = %e, "bad store snapshot; starting empty");
                    Store::default()
                }
            };
            if let Some(r) = st.recovered.remove(&subgroup) {
                // What this participant's own log holds, with what the member shipped
                // (but not what the domain went on without).
                store = Store::merged(&store, &Store::consistent_with(&r, &store), depth);
            }
            got.extend(prime_readers(&st, subgroup, &store));
            let mut announced = BTreeSet::new();
            if subgroup == BUILTIN_SUBGROUP {
                // The built-in table as the giver had it: rebuilt from its store.
                st.endpoints.clear();
                for s in store.iter() {
                    apply_announcement(&mut st, s.origin.node, &s.bytes, &mut announced);
                }
                // The store still holds announcements of participants that left.
                let members: Vec<NodeId> = st
                    .view
                    .as_ref()
                    .map(|v| v.members.clone())
                    .unwrap_or_default();
                st.endpoints.retain(|(node, _), _| members.contains(node));
            }
            st.stores.insert(subgroup, store);
            st.awaiting_state.remove(&subgroup);
            rematched = rematch_local(&st, None, &self.shared);
            if subgroup == BUILTIN_SUBGROUP {
                for r in st.readers.values().flatten() {
                    let heard = r.release_held(&|w, tag| st.judging(w, tag), false);
                    sort_out(r, heard, &mut got, &mut lost);
                }
            }
        }
        self.shared.view_changed.notify_all();
        notify_all();
        DdsApp::listeners(got, StatusMask::DATA_AVAILABLE);
        DdsApp::listeners(lost, StatusMask::SAMPLE_LOST);
        fire(rematched);
    }

    fn undeliverable(&mut self, subgroup: SubgroupId, payloads: Vec<Vec<u8>>) {
        tracing::warn!(
            subgroup,
            count = payloads.len(),
            "samples written while this participant stopped writing the topic were not delivered"
        );
    }

    fn stopped(&mut self, why: Option<&str>) {
        // Shut down by the group (excluded, cut off), not left: a participant configured
        // to rejoin does so ([`crate::participant`]); meanwhile its writes wait.
        if why.is_some() && self.shared.rejoin_enabled.load(Ordering::Acquire) {
            self.shared.rejoining.store(true, Ordering::Release);
        }
        let why = why.unwrap_or("left the domain").to_string();
        lock(&self.shared.state).stopped = Some(why.clone());
        self.shared.view_changed.notify_all();
        notify_all();
        self.shared.stopped_flag.store(true, Ordering::Release);
        let listener = lock(&self.shared.stopped_listener).clone();
        if let Some(l) = listener {
            crate::shared::fire_stopped(&l, &why);
        }
    }
}

/// Puts reader `r` among `available` if `heard` (what its `route` or `release_held`
/// said) has DATA_AVAILABLE, and among `lost` if it has SAMPLE_LOST.
fn sort_out(
    r: &Arc<ReaderCore>,
    heard: StatusMask,
    available: &mut Vec<Arc<ReaderCore>>,
    lost: &mut Vec<Arc<ReaderCore>>,
) {
    if heard.intersects(StatusMask::DATA_AVAILABLE) {
        available.push(Arc::clone(r));
    }
    if heard.intersects(StatusMask::SAMPLE_LOST) {
        lost.push(Arc::clone(r));
    }
}

/// Primes this node's readers of `subgroup` from `store`; returns those that got samples.
fn prime_readers(st: &State, subgroup: SubgroupId, store: &Store) -> Vec<Arc<ReaderCore>> {
    let mut got = Vec::new();
    if store.is_empty() {
        return got;
    }
    let table_whole = st.table_whole();
    for rs in st.readers.values() {
        for r in rs.iter().filter(|r| r.subgroup == subgroup) {
            if r.prime(
                store,
                &|w, tag| st.judging(w, tag),
                &st.endpoints,
                table_whole,
            ) {
                got.push(Arc::clone(r));
            }
        }
    }
    got
}

/// Status changes to report: readers with the statuses that changed, writers whose
/// matched status changed.
type Rematched = (Vec<(Arc<ReaderCore>, StatusMask)>, Vec<Arc<WriterCore>>);

/// Calls the listeners of what [`rematch_local`] changed (outside the state lock).
fn fire((readers, writers): Rematched) {
    for (r, mask) in readers {
        r.fire(mask);
    }
    for w in writers {
        w.fire();
    }
}

/// Applies one built-in announcement sent by `node` to the endpoint table, noting its
/// topic in `touched`. A message that does not decode is logged and dropped.
fn apply_announcement(st: &mut State, node: NodeId, bytes: &[u8], touched: &mut BTreeSet<u64>) {
    match discovery::decode(bytes) {
        Ok(Some((entity, Some(e)))) => {
            touched.insert(e.topic_id);
            let key = (node, entity);
            if let Some(old) = st.endpoints.get(&key) {
                touched.insert(old.topic_id);
                // Moved to other PARTITION names: its samples tagged with the old ones
                // are still judged by them.
                st.former.moved(key, old, &e);
            }
            st.endpoints.insert(key, e);
        }
        Ok(Some((entity, None))) => {
            let key = (node, entity);
            if let Some(old) = st.endpoints.remove(&key) {
                touched.insert(old.topic_id);
                // Its samples delivered after this are still judged by it.
                let former = st.former.remove(&key);
                st.gone.keep(key, old, former);
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(sender = node, error = %e, "built-in announcement dropped"),
    }
}

/// Writers a reader of some topic sees: those it matches, and those it does not with
/// why (their samples are not taken).
pub(crate) type WriterMatch = (Vec<EndpointKey>, Vec<(EndpointKey, Mismatch)>);

/// Readers a writer of some topic sees: those it matches, and those that request more
/// than it offers with the first policy that fails.
pub(crate) type ReaderMatch = (Vec<EndpointKey>, Vec<(EndpointKey, QosPolicyId)>);

/// The announcement of `key` if it is among `matched` (DDS `get_matched_*_data`), else
/// `BadParameter` naming it and `whose` matches (the entity asking).
pub(crate) fn matched_entry(
    st: &State,
    matched: &[EndpointKey],
    key: EndpointKey,
    whose: &str,
) -> crate::error::Result<Endpoint> {
    match st.endpoints.get(&key) {
        Some(e) if matched.contains(&key) => Ok(e.clone()),
        _ => Err(crate::error::Error::BadParameter(format!(
            "endpoint {}.{} is not matched by {whose}",
            key.0, key.1
        ))),
    }
}

/// A matched status's count of `keys` (the endpoint table is far below `u32::MAX`).
pub(crate) fn count(keys: &[EndpointKey]) -> u32 {
    u32::try_from(keys.len()).unwrap_or(u32::MAX)
}

/// Why writer `w` does not serve reader `r` though they share a partition: another type
/// or another definition of it ([`discovery::same_type`]), a lower delivery level (RELIABILITY, or DURABILITY when both are reliable), or another
/// policy failing the DDS request/offer rules ([`discovery::incompatible`]).
fn unmatched(w: &Endpoint, r: &Endpoint) -> Option<Mismatch> {
    if !discovery::same_type(w.type_identity(), r.type_identity()) {
        return Some(Mismatch::Type);
    }
    if w.level < r.level {
        return Some(Mismatch::Qos(if w.level == DeliveryLevel::Unordered {
            QosPolicyId::Reliability
        } else {
            QosPolicyId::Durability
        }));
    }
    discovery::incompatible(w, r).map(Mismatch::Qos)
}

/// Splits the writers among `endpoints` (all of one topic) that share a partition with
/// reader `r` into those it matches and those whose QoS it cannot accept (a writer in
/// no common partition is not matched at all, compatible or not); the writers its
/// participant ignores are among the latter, whatever their partition, as
/// [`Mismatch::Ignored`] (their samples are not taken).
fn split_writers<'a>(
    endpoints: impl Iterator<Item = (&'a EndpointKey, &'a Endpoint)>,
    r: &Endpoint,
    ignored: &Ignored,
) -> WriterMatch {
    let mut compatible = Vec::new();
    let mut incompatible = Vec::new();
    for (k, w) in endpoints.filter(|(_, w)| !w.reader) {
        if ignored.covers(k, false) {
            incompatible.push((*k, Mismatch::Ignored));
            continue;
        }
        if !partitions_match(&w.partition, &r.partition) {
            continue;
        }
        match unmatched(w, r) {
            None => compatible.push(*k),
            Some(why) => incompatible.push((*k, why)),
        }
    }
    (compatible, incompatible)
}

/// The writers of `r`'s topic that reader `r` matches, from the endpoint table.
pub(crate) fn writers_of(st: &State, r: &Endpoint) -> WriterMatch {
    split_writers(
        st.endpoints
            .iter()
            .filter(|(_, e)| e.topic_id == r.topic_id),
        r,
        &st.ignored,
    )
}

/// The readers of `w`'s topic that writer `w` matches.
pub(crate) fn readers_of(st: &State, w: &Endpoint) -> Vec<EndpointKey> {
    split_readers(
        st.endpoints
            .iter()
            .filter(|(_, e)| e.topic_id == w.topic_id),
        w,
        &st.ignored,
    )
    .0
}

/// The readers among `endpoints` (one topic's) that share a partition with writer `w`:
/// those it matches, and those that request more than it offers, with the first policy
/// that fails (readers of another type are in neither: INCONSISTENT_TOPIC; nor are those
/// its participant ignores).
fn split_readers<'a>(
    endpoints: impl Iterator<Item = (&'a EndpointKey, &'a Endpoint)>,
    w: &Endpoint,
    ignored: &Ignored,
) -> ReaderMatch {
    let mut matched = Vec::new();
    let mut incompatible = Vec::new();
    for (k, r) in endpoints.filter(|(k, r)| {
        r.reader && partitions_match(&w.partition, &r.partition) && !ignored.covers(k, true)
    }) {
        match unmatched(w, r) {
            None => matched.push(*k),
            Some(Mismatch::Qos(policy)) => incompatible.push((*k, policy)),
            Some(Mismatch::Type | Mismatch::Ignored) => {}
        }
    }
    (matched, incompatible)
}

/// Ignores `what` from now on (the participant's `ignore_*`): every reader and writer
/// of this participant is matched again without it, listeners called, conditions woken.
pub(crate) fn ignore(shared: &Shared, what: Ignore) -> crate::error::Result<()> {
    let rematched = {
        let mut st = lock(&shared.state);
        st.ignored.add(what)?;
        rematch_local(&st, None, shared)
    };
    shared.view_changed.notify_all();
    notify_all();
    fire(rematched);
    Ok(())
}

/// Recomputes the matched statuses of this node's readers and writers on `topics` (every
/// topic: `None`) from the endpoint table, and the writer leases its readers watch (from
/// now for writers newly matched, with the participant's timer asked to check them).
fn rematch_local(st: &State, topics: Option<&BTreeSet<u64>>, shared: &Shared) -> Rematched {
    let now_us = shared.clock.now_us();
    let vid = st.view.as_ref().map_or(0, |v| v.vid);
    let wanted = |t: &u64| topics.is_none_or(|ts| ts.contains(t));
    // One pass over the table, grouped by the topics asked for.
    let mut by_topic: BTreeMap<u64, BTreeMap<EndpointKey, &Endpoint>> = BTreeMap::new();
    // Ignored endpoints stay in: `split_writers` blocks ignored writers, and the
    // others leave them out.
    for (k, e) in &st.endpoints {
        if wanted(&e.topic_id) {
            by_topic.entry(e.topic_id).or_default().insert(*k, e);
        }
    }
    let empty = BTreeMap::new();
    let mut readers = Vec::new();
    for (t, rs) in st.readers.iter().filter(|(t, _)| wanted(t)) {
        let eps = by_topic.get(t).unwrap_or(&empty);
        if let Some(r) = rs.first() {
            note_inconsistent(shared, &r.topic, eps, &st.ignored);
        }
        for r in rs {
            let me = r.endpoint();
            let (compatible, incompatible) =
                split_writers(eps.iter().map(|(k, e)| (k, *e)), &me, &st.ignored);
            let leased = leased_writers(eps, r, &st.ignored);
            if let Some(shortest) = leased.iter().map(|(_, _, l)| *l).min() {
                shared.want_timer(shortest);
                shared.leases_watched.store(true, Ordering::Release);
            }
            r.watch_leases(&leased, now_us);
            let mask = r.rematch(shared.me, vid, count(&compatible), &incompatible);
            if mask != StatusMask::NONE {
                readers.push((Arc::clone(r), mask));
            }
        }
    }
    let mut writers = Vec::new();
    for w in st.writers.values().filter(|w| wanted(&w.topic.topic_id)) {
        let eps = by_topic.get(&w.topic.topic_id).unwrap_or(&empty);
        note_inconsistent(shared, &w.topic, eps, &st.ignored);
        let (matched, incompatible) =
            split_readers(eps.iter().map(|(k, e)| (k, *e)), &w.endpoint(), &st.ignored);
        w.offered_incompatible(shared.me, &incompatible);
        if w.on_view(vid, count(&matched)) {
            writers.push(Arc::clone(w));
        }
    }
    (readers, writers)
}

/// Counts in INCONSISTENT_TOPIC, once each, the endpoints among `eps` (the table's of
/// `topic`'s name) whose type is not `topic`'s — another type name, or another definition
/// of the same name ([`discovery::same_type`], the rule [`unmatched`] applies) — with a
/// warning naming them: they are not matched, so a mistyped reader or writer shows here
/// instead of as undecodable samples. Those the participant ignores count nowhere.
fn note_inconsistent(
    shared: &Shared,
    topic: &crate::common::TopicIdentity,
    eps: &BTreeMap<EndpointKey, &Endpoint>,
    ignored: &Ignored,
) {
    let mine = (topic.type_id, topic.type_hash);
    let foreign = eps.iter().filter(|(k, e)| {
        !discovery::same_type(e.type_identity(), mine) && !ignored.covers(k, e.reader)
    });
    let mut all = lock(&shared.inconsistent);
    for ((node, entity), e) in foreign {
        let t = all.entry(topic.topic_id).or_default();
        if t.seen.insert((*node, *entity)) {
            t.status.total_count += 1;
            t.status.total_count_change += 1;
            let role = if e.reader { "reader" } else { "writer" };
            if e.type_id == topic.type_id {
                tracing::warn!(
                    topic = %topic.name,
                    this_type = %topic.type_name,
                    "{role} {node}.{entity} is on topic {:?} with type {} defined \
                     differently than this participant's (structural hash {:#018x}, not \
                     {:#018x}): the definitions differ, not matched (INCONSISTENT_TOPIC)",
                    topic.name,
                    topic.type_name,
                    e.type_hash.unwrap_or(0),
                    topic.type_hash.unwrap_or(0)
                );
            } else {
                tracing::warn!(
                    topic = %topic.name,
                    this_type = %topic.type_name,
                    "{role} {node}.{entity} is on topic {:?} with another type than this \
                     participant's {}: not matched (INCONSISTENT_TOPIC)",
                    topic.name,
                    topic.type_name
                );
            }
        }
    }
}

/// The matched writers of `r` (among `eps`, one topic's endpoints) with a MANUAL
/// LIVELINESS and a finite lease, which it watches.
fn leased_writers(
    eps: &BTreeMap<EndpointKey, &Endpoint>,
    r: &ReaderCore,
    ignored: &Ignored,
) -> Vec<(WriterHandle, LivelinessKind, u64)> {
    let me = r.endpoint();
    eps.iter()
        .filter(|(k, e)| {
            !e.reader
                && !ignored.covers(k, false)
                && e.liveliness != LivelinessKind::Automatic
                && partitions_match(&e.partition, &me.partition)
                && unmatched(e, &me).is_none()
        })
        .filter_map(|((node, id), e)| {
            let w = WriterHandle {
                node: *node,
                writer_id: *id,
            };
            e.lease_us.map(|l| (w, e.liveliness, l))
        })
        .collect()
}

/// The passing of time up to `now_us` on the participant's clock: counts the instances
/// of readers and writers that went a DEADLINE period without data, and the LIVELINESS
/// leases that passed unrenewed (a reader's matched writers, a writer's own), and calls
/// the listeners. The timer thread calls it every tick; the simulation every round.
pub(crate) fn handle_timeout(shared: &Shared, now_us: u64) {
    let (readers, writers): (Vec<Arc<ReaderCore>>, Vec<Arc<WriterCore>>) = {
        let st = lock(&shared.state);
        (
            st.readers
                .values()
                .flatten()
                .filter(|r| r.deadline_us().is_some() || r.has_leases())
                .cloned()
                .collect(),
            st.writers
                .values()
                .filter(|w| w.deadline_us().is_some() || w.manual_lease_us().is_some())
                .cloned()
                .collect(),
        )
    };
    let mut any = false;
    for r in readers {
        let m = r.check_deadlines(now_us) | r.check_leases(now_us);
        if m != StatusMask::NONE {
            any = true;
            r.fire(m);
        }
    }
    for w in writers {
        any |= w.check_deadlines(now_us);
        any |= w.check_liveliness(now_us);
    }
    if any {
        notify_all();
    }
}
