//! The delivery path: the only place engine output enters DCPS.
//!
//! [`DdsApp`] is the participant's [`Application`]: the group hands it delivery batches,
//! views, state transfers and its stop, in order, and it routes samples into readers'
//! caches and the stores, turns views into matched statuses and fires listeners.
//! [`handle_timeout`] is the other input: the passing of time (DEADLINE). Both are
//! sans-IO — they change the shared state and call listeners, nothing else — so the
//! predicate thread (`threads.rs`) and the simulation (`sim.rs`) drive the same code.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use spindle_group::runtime::Application;
use spindle_group::{DeliveryBatch, SubgroupId, ViewInstalled};
use spindle_qos::DeliveryLevel;

use crate::cache::Origin;
use crate::common::{lock, set_delivery_thread};
use crate::condition::notify_all;
use crate::declare::dds_subgroups;
use crate::reader_core::ReaderCore;
use crate::sample::{SampleHeader, WriterHandle};
use crate::shared::Shared;
use crate::status::StatusMask;
use crate::store::Store;
use crate::writer_core::WriterCore;

/// The application the engine delivers to: routes samples to readers' caches and the
/// volatile stores, and turns views into matched statuses. It runs on the participant's
/// delivery thread, or inside a round of the simulated domain (`sim::SimDomain`).
pub struct DdsApp {
    shared: Arc<Shared>,
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
        DdsApp { shared }
    }

    fn listeners(readers: Vec<Arc<ReaderCore>>, mask: StatusMask) {
        for r in readers {
            r.fire(mask);
        }
    }
}

impl Application for DdsApp {
    fn deliver(&mut self, batch: &DeliveryBatch) {
        set_delivery_thread(true);
        let sg = batch.subgroup();
        let mut got: Vec<Arc<ReaderCore>> = Vec::new();
        {
            let mut st = lock(&self.shared.state);
            let vid = st.view.as_ref().map_or(0, |v| v.vid);
            let (keeps, depth) = st
                .subgroups
                .get(&sg)
                .map_or((false, 0), |d| (d.level.keeps_history(), d.store_depth));
            let mut items = Vec::with_capacity(batch.len());
            for m in batch.iter() {
                let (h, payload) = match SampleHeader::decode(m.payload) {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(subgroup = sg, sender = m.sender, error = %e, "message dropped");
                        continue;
                    }
                };
                let origin = Origin {
                    node: m.sender,
                    view_id: vid,
                    order_index: m.global_index,
                };
                if keeps {
                    st.stores
                        .entry(sg)
                        .or_default()
                        .push(&h, origin, m.payload, depth);
                }
                items.push((h, payload, origin));
            }
            // One lock of each reader's cache per batch, per topic in it.
            let mut topics: Vec<u64> = items.iter().map(|(h, _, _)| h.topic_id).collect();
            topics.sort_unstable();
            topics.dedup();
            for t in topics {
                let Some(rs) = st.readers.get(&t) else {
                    continue;
                };
                for r in rs.iter().filter(|r| r.subgroup == sg && r.is_matched()) {
                    let mine = items
                        .iter()
                        .filter(|(h, _, _)| h.topic_id == t)
                        .map(|(h, p, o)| (h, *p, *o));
                    if r.insert_all(mine) {
                        got.push(Arc::clone(r));
                    }
                }
            }
        }
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
        let mut changed: Vec<(Arc<ReaderCore>, StatusMask)> = Vec::new();
        let mut wchanged = Vec::new();
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
            let vid = view.vid;
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
                if *keeps && !st.awaiting_state.contains(sg) {
                    st.stores.entry(*sg).or_default();
                }
            }
            let gone = |w: &WriterHandle| !view.members.contains(&w.node);
            for rs in st.readers.values() {
                for r in rs {
                    let (matched, writers, level) = match st.subgroups.get(&r.subgroup) {
                        Some(d) if d.spec.members.contains(&me) => {
                            (true, d.spec.senders.len() as u32, d.level)
                        }
                        _ => (false, 0, DeliveryLevel::Unordered),
                    };
                    let mask = r.on_view(vid, matched, writers, level, &gone);
                    if mask != StatusMask::NONE {
                        changed.push((Arc::clone(r), mask));
                    }
                }
            }
            for w in st.writers.values() {
                let readers = st
                    .subgroups
                    .get(&w.subgroup)
                    .map_or(0, |d| d.readers.len() as u32);
                if w.on_view(vid, readers) {
                    wchanged.push(Arc::clone(w));
                }
            }
            st.view = Some(view);
        }
        self.shared.view_changed.notify_all();
        notify_all();
        for (r, mask) in changed {
            r.fire(mask);
        }
        for w in wchanged {
            w.fire();
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
        {
            let mut st = lock(&self.shared.state);
            let depth = st.subgroups.get(&subgroup).map_or(0, |d| d.store_depth);
            let store = match Store::from_snapshot(state, depth) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(subgroup, error = %e, "bad store snapshot; starting empty");
                    Store::default()
                }
            };
            for rs in st.readers.values() {
                for r in rs.iter().filter(|r| r.subgroup == subgroup) {
                    if r.prime(&store) {
                        got.push(Arc::clone(r));
                    }
                }
            }
            st.stores.insert(subgroup, store);
            st.awaiting_state.remove(&subgroup);
        }
        self.shared.view_changed.notify_all();
        notify_all();
        DdsApp::listeners(got, StatusMask::DATA_AVAILABLE);
    }

    fn undeliverable(&mut self, subgroup: SubgroupId, payloads: Vec<Vec<u8>>) {
        tracing::warn!(
            subgroup,
            count = payloads.len(),
            "samples written while this participant stopped writing the topic were not delivered"
        );
    }

    fn stopped(&mut self, why: Option<&str>) {
        lock(&self.shared.state).stopped = Some(why.unwrap_or("left the domain").to_string());
        self.shared.view_changed.notify_all();
        notify_all();
        self.shared.stopped_flag.store(true, Ordering::Release);
    }
}

/// The passing of time up to `now_us` on the participant's clock: counts the instances
/// of readers and writers that went a DEADLINE period without data and calls the
/// listeners. The deadline timer thread calls it every tick; the simulation every round.
pub(crate) fn handle_timeout(shared: &Shared, now_us: u64) {
    let (readers, writers): (Vec<Arc<ReaderCore>>, Vec<Arc<WriterCore>>) = {
        let st = lock(&shared.state);
        (
            st.readers
                .values()
                .flatten()
                .filter(|r| r.deadline_us().is_some())
                .cloned()
                .collect(),
            st.writers
                .values()
                .filter(|w| w.deadline_us.is_some())
                .cloned()
                .collect(),
        )
    };
    let mut any = false;
    for r in readers {
        let m = r.check_deadlines(now_us);
        if m != StatusMask::NONE {
            any = true;
            r.fire(m);
        }
    }
    for w in writers {
        any |= w.check_deadlines(now_us);
    }
    if any {
        notify_all();
    }
}
