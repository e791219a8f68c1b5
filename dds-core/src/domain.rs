//! Participants, topics, publishers and subscribers, and the application the engine
//! delivers to.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use spindle_group::runtime::{Application, GroupNode};
use spindle_group::{DeliveryBatch, Group, GroupConfig, SubgroupId, View, ViewInstalled};
use spindle_qos::{
    DataReaderQos, DataWriterQos, DeliveryLevel, DomainParticipantQos, PublisherQos, SubscriberQos,
    TopicQos,
};
use spindle_topics::TopicType;
use spindle_transport_rdma::{Endpoint, FabricConfig, NodeId};

use crate::cache::{Origin, Rejected};
use crate::condition::notify_all;
use crate::config::{ParticipantConfig, Transport};
use crate::declare::{
    dds_layout, dds_subgroups, encode_declaration, subgroup_of, topic_id, DdsSubgroup, Interest,
};
use crate::error::{Error, Result};
use crate::reader::{DataReader, ReaderCore};
use crate::sample::{InstanceHandle, SampleHeader, WriterHandle};
use crate::status::{rematch, SampleRejectedReason, StatusMask};
use crate::store::Store;
use crate::writer::{DataWriter, WriterCore};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    static ON_DELIVERY_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on a participant's delivery thread (inside listeners), where waiting for a view
/// change would deadlock.
pub(crate) fn on_delivery_thread() -> bool {
    ON_DELIVERY_THREAD.with(|c| c.get())
}

/// What the delivery thread and the application's threads share.
pub(crate) struct State {
    pub(crate) view: Option<View>,
    pub(crate) subgroups: BTreeMap<SubgroupId, DdsSubgroup>,
    pub(crate) readers: BTreeMap<u64, Vec<Arc<ReaderCore>>>,
    pub(crate) writers: BTreeMap<u32, Arc<WriterCore>>,
    pub(crate) stores: BTreeMap<SubgroupId, Store>,
    /// Store-level subgroups this node entered whose state a member will ship.
    pub(crate) awaiting_state: std::collections::BTreeSet<SubgroupId>,
    pub(crate) stopped: Option<String>,
}

pub(crate) struct Shared {
    pub(crate) me: NodeId,
    /// Set once `stopped` is (read without the state lock on every write).
    pub(crate) stopped_flag: AtomicBool,
    pub(crate) state: Mutex<State>,
    pub(crate) view_changed: Condvar,
}

impl Shared {
    fn new(me: NodeId) -> Arc<Shared> {
        Arc::new(Shared {
            me,
            stopped_flag: AtomicBool::new(false),
            state: Mutex::new(State {
                view: None,
                subgroups: BTreeMap::new(),
                readers: BTreeMap::new(),
                writers: BTreeMap::new(),
                stores: BTreeMap::new(),
                awaiting_state: Default::default(),
                stopped: None,
            }),
            view_changed: Condvar::new(),
        })
    }
}

/// The application the engine delivers to: routes samples to readers' caches and the
/// volatile stores, and turns views into matched statuses. It runs on the participant's
/// delivery thread; the sim tests drive it directly.
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
    fn listeners(readers: Vec<Arc<ReaderCore>>, mask: StatusMask) {
        for r in readers {
            r.fire(mask);
        }
    }
}

impl Application for DdsApp {
    fn deliver(&mut self, batch: &DeliveryBatch) {
        ON_DELIVERY_THREAD.with(|c| c.set(true));
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
        ON_DELIVERY_THREAD.with(|c| c.set(true));
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

/// Makes participants (DDS `DomainParticipantFactory`).
#[derive(Debug, Default)]
pub struct DomainParticipantFactory {
    _private: (),
}

static FACTORY: DomainParticipantFactory = DomainParticipantFactory { _private: () };

impl DomainParticipantFactory {
    /// The factory (DDS `get_instance`).
    pub fn instance() -> &'static DomainParticipantFactory {
        &FACTORY
    }

    /// Creates a participant in `domain_id` as `config` says, and waits until it is a
    /// member of the domain's group (its first view is installed).
    pub fn create_participant(
        &self,
        domain_id: u32,
        qos: DomainParticipantQos,
        config: &ParticipantConfig,
    ) -> Result<DomainParticipant> {
        qos.check()?;
        if config.domain_id != domain_id {
            return Err(Error::BadParameter(format!(
                "domain {domain_id}, but the configuration is for domain {}",
                config.domain_id
            )));
        }
        config.validate("participant configuration")?;
        let ep: Arc<dyn Endpoint> = match config.transport {
            Transport::Tcp => spindle_transport_rdma::tcp::TcpEndpoint::open(
                config.node_id,
                &config.listen,
                FabricConfig::default(),
            )?,
            Transport::Shm => spindle_transport_rdma::shm::ShmEndpoint::open(
                config.node_id,
                &config.listen,
                FabricConfig::default(),
            )?,
        };
        DomainParticipant::start(domain_id, qos, config.clone(), ep)
    }

    /// Deletes `participant`: it leaves the domain. `PreconditionNotMet` if it still has
    /// writers or readers.
    pub fn delete_participant(&self, participant: DomainParticipant) -> Result<()> {
        participant.delete()
    }
}

pub(crate) struct ParticipantInner {
    pub(crate) domain_id: u32,
    pub(crate) qos: DomainParticipantQos,
    pub(crate) config: ParticipantConfig,
    pub(crate) node: Mutex<Option<GroupNode>>,
    pub(crate) shared: Arc<Shared>,
    address: String,
    next_id: AtomicU32,
    /// Entity id → its interest (merged into the declaration).
    interests: Mutex<BTreeMap<u32, (SubgroupId, Interest)>>,
    topics: Mutex<BTreeMap<String, (String, TopicQos, usize)>>,
    deleted: AtomicBool,
    deadline_timer: AtomicBool,
}

impl ParticipantInner {
    pub(crate) fn me(&self) -> NodeId {
        self.shared.me
    }

    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.entity_timeout_ms)
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted("the participant was deleted".into()));
        }
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            if let Some(why) = &lock(&self.shared.state).stopped {
                return Err(Error::PreconditionNotMet(format!(
                    "the participant stopped: {why}"
                )));
            }
        }
        Ok(())
    }

    pub(crate) fn sender(&self, sg: SubgroupId) -> spindle_group::Result<spindle_group::Sender> {
        match &*lock(&self.node) {
            Some(n) => n.sender(sg),
            None => Err(spindle_group::Error::Stopped),
        }
    }

    fn next_entity_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Re-declares this participant's interests and waits (up to the entity time-out)
    /// until a view carries them and `ready` holds.
    pub(crate) fn redeclare(&self, ready: impl Fn(&State) -> bool) -> Result<()> {
        if on_delivery_thread() {
            return Err(Error::IllegalOperation(
                "entities cannot be created or deleted from a listener (the delivery thread)"
                    .into(),
            ));
        }
        let mut merged: BTreeMap<SubgroupId, Interest> = BTreeMap::new();
        for (sg, i) in lock(&self.interests).values() {
            merged.entry(*sg).and_modify(|m| m.merge(i)).or_insert(*i);
        }
        let bytes = encode_declaration(&merged)?;
        match &*lock(&self.node) {
            Some(n) => n.declare(bytes.clone())?,
            None => return Err(Error::AlreadyDeleted("the participant was deleted".into())),
        }
        let me = self.me();
        let deadline = Instant::now() + self.timeout();
        let mut st = lock(&self.shared.state);
        loop {
            if let Some(why) = &st.stopped {
                return Err(Error::PreconditionNotMet(format!(
                    "the participant stopped: {why}"
                )));
            }
            let carried = st
                .view
                .as_ref()
                .is_some_and(|v| v.declared.get(&me).map_or(&[][..], |d| d) == bytes.as_slice());
            if carried && ready(&st) {
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!(
                    "no view carried this participant's entities within {} ms",
                    self.config.entity_timeout_ms
                )));
            }
            let (g, _) = self
                .shared
                .view_changed
                .wait_timeout(st, left.min(Duration::from_millis(20)))
                .unwrap_or_else(|p| p.into_inner());
            st = g;
        }
    }

    /// Starts (once) the thread that checks readers' DEADLINE: every tick it counts the
    /// instances that went a period without data and calls the listeners. It ends with
    /// the participant.
    pub(crate) fn start_deadline_timer(&self, period_us: u64) {
        if self.deadline_timer.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let tick = Duration::from_micros((period_us / 4).clamp(1_000, 50_000));
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-deadline-{}", self.me()))
            .spawn(move || loop {
                std::thread::sleep(tick);
                let Some(shared) = weak.upgrade() else { break };
                if shared.stopped_flag.load(Ordering::Acquire) {
                    break;
                }
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
                let now = crate::cache::now_us();
                let mut any = false;
                for r in readers {
                    let m = r.check_deadlines(now);
                    if m != StatusMask::NONE {
                        any = true;
                        r.fire(m);
                    }
                }
                for w in writers {
                    any |= w.check_deadlines(now);
                }
                if any {
                    notify_all();
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the DEADLINE timer thread did not start");
            self.deadline_timer.store(false, Ordering::Release);
        }
    }

    pub(crate) fn add_interest(&self, id: u32, sg: SubgroupId, i: Interest) {
        lock(&self.interests).insert(id, (sg, i));
    }

    pub(crate) fn remove_interest(&self, id: u32) -> bool {
        lock(&self.interests).remove(&id).is_some()
    }
}

/// A participant in a domain (DDS `DomainParticipant`): one member of the domain's
/// top-level group. Cheap to clone; every clone is the same participant.
#[derive(Clone)]
pub struct DomainParticipant {
    pub(crate) inner: Arc<ParticipantInner>,
}

impl std::fmt::Debug for DomainParticipant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DomainParticipant")
            .field("domain_id", &self.inner.domain_id)
            .field("node", &self.inner.me())
            .finish()
    }
}

impl DomainParticipant {
    /// Starts a participant over an endpoint already open (the factory opens one from the
    /// configuration; tests may bring their own).
    pub fn start(
        domain_id: u32,
        qos: DomainParticipantQos,
        config: ParticipantConfig,
        ep: Arc<dyn Endpoint>,
    ) -> Result<DomainParticipant> {
        let me = config.node_id;
        let mut gcfg = GroupConfig::new(dds_layout());
        gcfg.join_retry_us = 50_000;
        let group = if config.bootstrap.contains(&me) {
            let mut addresses: BTreeMap<NodeId, String> = config
                .contacts
                .iter()
                .filter(|c| config.bootstrap.contains(&c.node))
                .map(|c| (c.node, c.address.clone()))
                .collect();
            addresses.insert(me, ep.address());
            Group::bootstrap(
                &*ep,
                View::new(1, config.bootstrap.clone()),
                addresses,
                gcfg,
                0,
            )?
        } else {
            let contacts = config
                .contacts
                .iter()
                .filter(|c| c.node != me)
                .map(|c| (c.node, c.address.clone()))
                .collect();
            Group::join(&*ep, contacts, gcfg)?
        };
        let shared = Shared::new(me);
        let app = DdsApp {
            shared: Arc::clone(&shared),
        };
        let node = GroupNode::start(Arc::clone(&ep), group, app, 1_000)?;
        let inner = Arc::new(ParticipantInner {
            domain_id,
            qos,
            config,
            node: Mutex::new(Some(node)),
            shared,
            address: ep.address(),
            next_id: AtomicU32::new(1),
            interests: Mutex::new(BTreeMap::new()),
            topics: Mutex::new(BTreeMap::new()),
            deleted: AtomicBool::new(false),
            deadline_timer: AtomicBool::new(false),
        });
        let deadline = Instant::now() + inner.timeout();
        let mut st = lock(&inner.shared.state);
        while st.view.is_none() {
            if let Some(why) = &st.stopped {
                return Err(Error::Error(format!("joining domain {domain_id}: {why}")));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(format!(
                    "node {me} did not join domain {domain_id} within {} ms",
                    inner.config.entity_timeout_ms
                )));
            }
            st = inner
                .shared
                .view_changed
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        drop(st);
        Ok(DomainParticipant { inner })
    }

    /// The domain id.
    pub fn domain_id(&self) -> u32 {
        self.inner.domain_id
    }

    /// This participant's node id (also its instance handle).
    pub fn node_id(&self) -> NodeId {
        self.inner.me()
    }

    /// Its fabric address: what other participants list in their contacts.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The QoS it was created with.
    pub fn qos(&self) -> &DomainParticipantQos {
        &self.inner.qos
    }

    /// The installed view: the domain's members now.
    pub fn view(&self) -> Option<View> {
        lock(&self.inner.shared.state).view.clone()
    }

    /// Why the participant stopped (shut down by the view change protocol, or left).
    pub fn stopped(&self) -> Option<String> {
        lock(&self.inner.shared.state).stopped.clone()
    }

    /// Registers topic `name` of type `T` (DDS `create_topic`). Creating the same name
    /// again with the same type returns another handle to it; with another type,
    /// `PreconditionNotMet`. `LoggedStore` (PERSISTENT) is not supported yet.
    pub fn create_topic<T: TopicType>(&self, name: &str, qos: TopicQos) -> Result<Topic<T>> {
        self.inner.check_alive()?;
        if name.is_empty() || name.len() > 256 {
            return Err(Error::BadParameter(format!(
                "topic name {name:?}: 1 to 256 bytes"
            )));
        }
        qos.check()?;
        check_level(qos.delivery_level(), name)?;
        let mut topics = lock(&self.inner.topics);
        if let Some((ty, _, count)) = topics.get_mut(name) {
            if ty != T::TYPE_NAME {
                return Err(Error::PreconditionNotMet(format!(
                    "topic {name:?} exists with type {ty}, not {}",
                    T::TYPE_NAME
                )));
            }
            *count += 1;
        } else {
            topics.insert(name.to_string(), (T::TYPE_NAME.to_string(), qos.clone(), 1));
        }
        Ok(Topic {
            inner: Arc::new(TopicInner {
                participant: Arc::clone(&self.inner),
                name: name.to_string(),
                qos,
                topic_id: topic_id(name),
                subgroup: subgroup_of(name),
            }),
            _t: PhantomData,
        })
    }

    /// Finds a topic this participant created (DDS `find_topic`, local only).
    pub fn find_topic<T: TopicType>(&self, name: &str) -> Result<Topic<T>> {
        let qos = lock(&self.inner.topics)
            .get(name)
            .map(|t| t.1.clone())
            .ok_or_else(|| Error::PreconditionNotMet(format!("no topic {name:?}")))?;
        self.create_topic(name, qos)
    }

    /// Deletes a topic handle (DDS `delete_topic`).
    pub fn delete_topic<T: TopicType>(&self, topic: Topic<T>) -> Result<()> {
        let mut topics = lock(&self.inner.topics);
        if let Some((_, _, count)) = topics.get_mut(&topic.inner.name) {
            *count -= 1;
            if *count == 0 {
                topics.remove(&topic.inner.name);
            }
        }
        Ok(())
    }

    /// A publisher (DDS `create_publisher`).
    pub fn create_publisher(&self, qos: PublisherQos) -> Result<Publisher> {
        self.inner.check_alive()?;
        qos.check()?;
        Ok(Publisher {
            participant: Arc::clone(&self.inner),
            qos,
        })
    }

    /// A subscriber (DDS `create_subscriber`).
    pub fn create_subscriber(&self, qos: SubscriberQos) -> Result<Subscriber> {
        self.inner.check_alive()?;
        qos.check()?;
        Ok(Subscriber {
            participant: Arc::clone(&self.inner),
            qos,
        })
    }

    /// Deletes a publisher (its writers must be deleted first).
    pub fn delete_publisher(&self, _publisher: Publisher) -> Result<()> {
        Ok(())
    }

    /// Deletes a subscriber (its readers must be deleted first).
    pub fn delete_subscriber(&self, _subscriber: Subscriber) -> Result<()> {
        Ok(())
    }

    /// Leaves the domain. `PreconditionNotMet` while writers or readers exist.
    pub fn delete(self) -> Result<()> {
        if !lock(&self.inner.interests).is_empty() {
            return Err(Error::PreconditionNotMet(
                "the participant still has writers or readers; delete them first".into(),
            ));
        }
        self.inner.deleted.store(true, Ordering::Release);
        self.inner
            .shared
            .stopped_flag
            .store(true, Ordering::Release);
        let node = lock(&self.inner.node).take();
        if let Some(n) = node {
            n.leave();
            let deadline = Instant::now() + self.inner.timeout();
            while !n.is_done() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            n.stop();
        }
        Ok(())
    }

    /// Stops this participant's thread without leaving the domain (as a crash would:
    /// the others remove it by a view change).
    pub fn close(self) {
        self.inner.deleted.store(true, Ordering::Release);
        self.inner
            .shared
            .stopped_flag
            .store(true, Ordering::Release);
        if let Some(n) = lock(&self.inner.node).take() {
            n.stop();
        }
    }
}

fn check_level(level: DeliveryLevel, topic: &str) -> Result<()> {
    if level == DeliveryLevel::LoggedStore {
        return Err(Error::Unsupported(format!(
            "topic {topic:?}: DURABILITY PERSISTENT (the LoggedStore level) needs the \
             persistent log, which is not built yet; use TRANSIENT_LOCAL or TRANSIENT \
             (VolatileStore) instead"
        )));
    }
    Ok(())
}

pub(crate) struct TopicInner {
    pub(crate) participant: Arc<ParticipantInner>,
    pub(crate) name: String,
    pub(crate) qos: TopicQos,
    pub(crate) topic_id: u64,
    pub(crate) subgroup: SubgroupId,
}

/// A topic of type `T` (DDS `Topic`). Cheap to clone.
pub struct Topic<T: TopicType> {
    pub(crate) inner: Arc<TopicInner>,
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Topic {
            inner: Arc::clone(&self.inner),
            _t: PhantomData,
        }
    }
}

impl<T: TopicType> std::fmt::Debug for Topic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic")
            .field("name", &self.inner.name)
            .field("type", &T::TYPE_NAME)
            .field("subgroup", &self.inner.subgroup)
            .finish()
    }
}

impl<T: TopicType> Topic<T> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// The type's name.
    pub fn type_name(&self) -> &'static str {
        T::TYPE_NAME
    }
    /// The topic's QoS.
    pub fn qos(&self) -> &TopicQos {
        &self.inner.qos
    }
    /// The subgroup that carries it.
    pub fn subgroup(&self) -> SubgroupId {
        self.inner.subgroup
    }
}

/// Slot payload bytes a writer or reader of `T` needs.
fn slot_bytes_for<T: TopicType>(cfg: &ParticipantConfig) -> usize {
    let need = T::MAX_SERIALIZED_SIZE.map_or(cfg.slot_payload_bytes, |m| {
        m + crate::sample::SAMPLE_HEADER_BYTES
    });
    need.clamp(1, 64 * 1024)
}

fn store_depth(history: &spindle_qos::History) -> u16 {
    match history.kind {
        spindle_qos::HistoryKind::KeepAll => 0,
        spindle_qos::HistoryKind::KeepLast => history.depth.clamp(1, i32::from(u16::MAX)) as u16,
    }
}

/// Creates writers (DDS `Publisher`).
#[derive(Clone)]
pub struct Publisher {
    participant: Arc<ParticipantInner>,
    qos: PublisherQos,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("qos", &self.qos).finish()
    }
}

impl Publisher {
    /// The publisher's QoS.
    pub fn qos(&self) -> &PublisherQos {
        &self.qos
    }

    /// Creates a writer on `topic` and waits until the view carries it: when this
    /// returns, `write` reaches every reader the view holds.
    pub fn create_datawriter<T: TopicType>(
        &self,
        topic: &Topic<T>,
        qos: DataWriterQos,
    ) -> Result<DataWriter<T>> {
        let p = &self.participant;
        qos.check()?;
        let (id, interest) = new_entity(
            p,
            topic,
            qos.delivery_level(),
            false,
            store_depth(&qos.history),
        )?;
        let sg = topic.inner.subgroup;
        let core = WriterCore::new(id, Arc::clone(&topic.inner), qos);
        if let Some(period) = core.deadline_us {
            p.start_deadline_timer(period);
        }
        p.add_interest(id, sg, interest);
        lock(&p.shared.state).writers.insert(id, Arc::clone(&core));
        let me = p.me();
        let ready = |st: &State| {
            st.subgroups
                .get(&sg)
                .is_some_and(|d| d.spec.senders.contains(&me))
        };
        if let Err(e) = p.redeclare(ready).and_then(|_| wait_sender(p, sg)) {
            p.remove_interest(id);
            lock(&p.shared.state).writers.remove(&id);
            let _ = p.redeclare(|_| true);
            return Err(e);
        }
        let w = DataWriter::new(core);
        w.refresh_matched();
        Ok(w)
    }

    /// Deletes a writer: the participant stops sending in its topic's subgroup (a view
    /// change) once no other writer of it remains.
    pub fn delete_datawriter<T: TopicType>(&self, writer: DataWriter<T>) -> Result<()> {
        let p = &self.participant;
        let id = writer.core().id;
        if !p.remove_interest(id) {
            return Err(Error::AlreadyDeleted(format!("writer {id}")));
        }
        writer.core().deleted.store(true, Ordering::Release);
        lock(&p.shared.state).writers.remove(&id);
        p.redeclare(|_| true)
    }
}

/// Checks what every new writer or reader needs and returns its id and interest.
fn new_entity<T: TopicType>(
    p: &Arc<ParticipantInner>,
    topic: &Topic<T>,
    level: DeliveryLevel,
    reader: bool,
    store_depth: u16,
) -> Result<(u32, Interest)> {
    p.check_alive()?;
    if !Arc::ptr_eq(&topic.inner.participant, p) {
        return Err(Error::BadParameter(
            "the topic belongs to another participant".into(),
        ));
    }
    check_level(level, &topic.inner.name)?;
    Ok((
        p.next_entity_id(),
        Interest {
            reader,
            writer: !reader,
            level,
            window_slots: p.config.window_slots,
            slot_payload_bytes: slot_bytes_for::<T>(&p.config),
            store_depth,
        },
    ))
}

/// Waits for the engine to hand out the sender of `sg` (after the view's re-sends).
fn wait_sender(p: &ParticipantInner, sg: SubgroupId) -> Result<()> {
    let deadline = Instant::now() + p.timeout();
    loop {
        if p.sender(sg).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout(format!("no sender for subgroup {sg}")));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Creates readers (DDS `Subscriber`).
#[derive(Clone)]
pub struct Subscriber {
    participant: Arc<ParticipantInner>,
    qos: SubscriberQos,
}

impl std::fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscriber")
            .field("qos", &self.qos)
            .finish()
    }
}

impl Subscriber {
    /// The subscriber's QoS.
    pub fn qos(&self) -> &SubscriberQos {
        &self.qos
    }

    /// Creates a reader on `topic` and waits until the view carries it: every sample
    /// written after this returns reaches it; on a store-level topic it also holds the
    /// stored history.
    pub fn create_datareader<T: TopicType>(
        &self,
        topic: &Topic<T>,
        qos: DataReaderQos,
    ) -> Result<DataReader<T>> {
        let p = &self.participant;
        qos.check()?;
        // What a store keeps is the writers' history (TRANSIENT_LOCAL); a reader's own
        // HISTORY bounds only its cache.
        let (id, interest) = new_entity(p, topic, qos.delivery_level(), true, 1)?;
        let sg = topic.inner.subgroup;
        let core = ReaderCore::new(id, Arc::clone(&topic.inner), qos);
        if let Some(period) = core.deadline_us() {
            p.start_deadline_timer(period);
        }
        {
            // Registered and primed from this node's store (if it already holds the
            // subgroup) under one lock, so no delivery is missed or seen twice.
            let mut st = lock(&p.shared.state);
            if let Some(store) = st.stores.get(&sg) {
                core.prime(store);
            }
            st.readers
                .entry(topic.inner.topic_id)
                .or_default()
                .push(Arc::clone(&core));
        }
        p.add_interest(id, sg, interest);
        let me = p.me();
        let ready = |st: &State| {
            // Either this node reads the subgroup now, or no writer exists yet (the
            // reader matches when one comes).
            // On a store-level topic, the stored history has arrived too.
            st.subgroups
                .get(&sg)
                .is_none_or(|d| d.readers.contains(&me))
                && !st.awaiting_state.contains(&sg)
        };
        if let Err(e) = p.redeclare(ready) {
            p.remove_interest(id);
            unregister_reader(p, &core);
            let _ = p.redeclare(|_| true);
            return Err(e);
        }
        let r = DataReader::new(core);
        r.refresh_matched();
        Ok(r)
    }

    /// Deletes a reader.
    pub fn delete_datareader<T: TopicType>(&self, reader: DataReader<T>) -> Result<()> {
        let p = &self.participant;
        let core = reader.core();
        if !p.remove_interest(core.id) {
            return Err(Error::AlreadyDeleted(format!("reader {}", core.id)));
        }
        core.deleted.store(true, Ordering::Release);
        unregister_reader(p, core);
        p.redeclare(|_| true)
    }
}

fn unregister_reader(p: &ParticipantInner, core: &Arc<ReaderCore>) {
    let mut st = lock(&p.shared.state);
    if let Some(rs) = st.readers.get_mut(&core.topic.topic_id) {
        rs.retain(|r| !Arc::ptr_eq(r, core));
    }
    core.clear_listener();
}

/// Maps a cache rejection to the status reason.
pub(crate) fn reason(r: &Rejected) -> SampleRejectedReason {
    match r {
        Rejected::Instances => SampleRejectedReason::ByInstancesLimit,
        Rejected::Samples => SampleRejectedReason::BySamplesLimit,
        Rejected::SamplesPerInstance => SampleRejectedReason::BySamplesPerInstanceLimit,
    }
}

/// Updates a matched status; re-exported for the entity modules.
pub(crate) fn update_matched(s: &mut crate::status::MatchedStatus, current: u32, vid: u32) -> bool {
    rematch(s, current, vid)
}

/// The instance handle of `data`'s key (zeros for a keyless type).
pub(crate) fn instance_of<T: TopicType>(data: &T) -> Result<InstanceHandle> {
    if T::HAS_KEY {
        Ok(InstanceHandle(data.key_hash()?))
    } else {
        Ok(InstanceHandle::default())
    }
}
