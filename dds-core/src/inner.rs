//! What every entity holds of its participant and topic: [`ParticipantInner`] (its
//! configuration, its [`Driver`], its declared interests, the waits for view changes) and
//! [`TopicInner`]. The public handles (`participant.rs`, `topic.rs`, `publisher.rs`,
//! `subscriber.rs`, `reader.rs`, `writer.rs`) are thin layers over these.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spindle_group::SubgroupId;
use spindle_qos::{DeliveryLevel, DomainParticipantQos, Partition, TopicQos};
use spindle_topics::TopicType;
use spindle_transport_rdma::NodeId;

use crate::common::{lock, on_delivery_thread, TopicIdentity};
use crate::config::ParticipantConfig;
use crate::contained::Contained;
use crate::declare::{domain_topic_subgroups, encode_declaration, Interest, BUILTIN_SUBGROUP};
use crate::discovery::{self, Endpoint};
use crate::error::{Error, Result};
use crate::reader_core::ReaderCore;
use crate::shared::{Driver, Shared, State};
use crate::writer_core::WriterCore;

/// The entity id of the participant's own interest in the built-in subgroup (entities
/// proper are numbered from 1).
pub(crate) const BUILTIN_ENTITY: u32 = 0;
/// Ring slots per sender of the built-in subgroup.
const BUILTIN_WINDOW_SLOTS: usize = 64;
/// How long a participant waiting to send an announcement lets pass between tries.
const ANNOUNCE_POLL: Duration = Duration::from_micros(50);

/// Longest single wait for a view change before the waiter looks again.
const VIEW_WAIT_SLICE: Duration = Duration::from_millis(20);

/// A topic name as a participant registered it: the type name, the QoS, the handles
/// open, and the structural hash of the type's definition once a handle knew it.
pub(crate) type RegisteredTopic = (String, TopicQos, usize, Option<u64>);

/// A participant's inner state. See the module docs.
pub(crate) struct ParticipantInner {
    pub(crate) domain_id: u32,
    pub(crate) qos: DomainParticipantQos,
    pub(crate) config: ParticipantConfig,
    pub(crate) driver: Box<dyn Driver>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) address: String,
    next_id: AtomicU32,
    /// Entity id → its interest (merged into the declaration).
    interests: Mutex<BTreeMap<u32, (SubgroupId, Interest)>>,
    /// Topic name → what this participant registered under it.
    pub(crate) topics: Mutex<BTreeMap<String, RegisteredTopic>>,
    /// Its publishers' writers, until each publisher is deleted.
    pub(crate) publishers: Mutex<Vec<Arc<Contained<WriterCore>>>>,
    /// Its subscribers' readers, until each subscriber is deleted.
    pub(crate) subscribers: Mutex<Vec<Arc<Contained<ReaderCore>>>>,
    pub(crate) deleted: AtomicBool,
    /// Where the Prometheus endpoint listens, if it does ([`crate::metrics`]).
    pub(crate) metrics_address: Mutex<Option<std::net::SocketAddr>>,
    /// While rejoining: this participant's own readers and writers as the table held
    /// them when it stopped, to announce again once it is a member.
    rejoin_endpoints: Mutex<Vec<Endpoint>>,
    /// The QoS its `default_*_qos` getters give (DDS `set_default_*_qos`).
    pub(crate) defaults: Mutex<Defaults>,
}

/// A participant's default QoS for the entities it creates (DDS `TOPIC_QOS_DEFAULT`,
/// `PUBLISHER_QOS_DEFAULT`, `SUBSCRIBER_QOS_DEFAULT`), the specification's until set.
#[derive(Debug, Default)]
pub(crate) struct Defaults {
    pub(crate) topic: TopicQos,
    pub(crate) publisher: spindle_qos::PublisherQos,
    pub(crate) subscriber: spindle_qos::SubscriberQos,
}

impl ParticipantInner {
    pub(crate) fn new(
        domain_id: u32,
        qos: DomainParticipantQos,
        config: ParticipantConfig,
        driver: Box<dyn Driver>,
        shared: Arc<Shared>,
        address: String,
    ) -> ParticipantInner {
        ParticipantInner {
            domain_id,
            qos,
            config,
            driver,
            shared,
            address,
            next_id: AtomicU32::new(1),
            interests: Mutex::new(BTreeMap::new()),
            topics: Mutex::new(BTreeMap::new()),
            publishers: Mutex::new(Vec::new()),
            subscribers: Mutex::new(Vec::new()),
            deleted: AtomicBool::new(false),
            metrics_address: Mutex::new(None),
            rejoin_endpoints: Mutex::new(Vec::new()),
            defaults: Mutex::new(Defaults::default()),
        }
    }

    pub(crate) fn me(&self) -> NodeId {
        self.shared.me
    }

    /// The entity time-out (`entity_timeout_ms`).
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.entity_timeout_ms)
    }

    /// Now on the participant's clock, in µs.
    pub(crate) fn now_us(&self) -> u64 {
        self.shared.clock.now_us()
    }

    /// The participant's clock.
    pub(crate) fn clock(&self) -> &dyn crate::clock::Clock {
        &*self.shared.clock
    }

    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted("the participant was deleted".into()));
        }
        if self.shared.stopped_flag.load(Ordering::Acquire)
            && !self.shared.rejoining.load(Ordering::Acquire)
        {
            if let Some(why) = &lock(&self.shared.state).stopped {
                return Err(Error::PreconditionNotMet(format!(
                    "the participant stopped: {why}"
                )));
            }
        }
        Ok(())
    }

    /// The sender of `sg`; `Wedged` (wait, as through a view change) while the
    /// participant rejoins.
    pub(crate) fn sender(&self, sg: SubgroupId) -> spindle_group::Result<spindle_group::Sender> {
        match self.driver.sender(sg) {
            Err(_) if self.shared.rejoining.load(Ordering::Acquire) => {
                Err(spindle_group::Error::Wedged { subgroup: sg })
            }
            r => r,
        }
    }

    pub(crate) fn next_entity_id(&self) -> u32 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Waits up to `timeout` (on the participant's clock) until `done` holds of the
    /// shared state; `what` names the wait in the time-out error (it is given the state,
    /// so the error can say how far the wait got). Gives up early, with
    /// `PreconditionNotMet`, if the participant stopped.
    pub(crate) fn wait_until(
        &self,
        timeout: Duration,
        what: impl Fn(&State) -> String,
        done: impl Fn(&State) -> bool,
    ) -> Result<()> {
        let deadline_us = self
            .now_us()
            .saturating_add(crate::common::saturating_us(timeout));
        let mut st = lock(&self.shared.state);
        loop {
            match &st.stopped {
                Some(_) if self.shared.rejoining.load(Ordering::Acquire) => {}
                Some(why) => {
                    return Err(Error::PreconditionNotMet(format!(
                        "the participant stopped: {why}"
                    )))
                }
                None => {}
            }
            if done(&st) {
                return Ok(());
            }
            let left_us = deadline_us.saturating_sub(self.now_us());
            if left_us == 0 {
                return Err(Error::Timeout(what(&st)));
            }
            let left = Duration::from_micros(left_us).min(VIEW_WAIT_SLICE);
            st = self.driver.wait_changed(&self.shared, st, left);
        }
    }

    /// Polls `done` (letting `poll` pass between looks) until it holds or `timeout`
    /// passes on the participant's clock; false on time-out.
    pub(crate) fn poll_until(
        &self,
        timeout: Duration,
        poll: Duration,
        mut done: impl FnMut() -> bool,
    ) -> bool {
        let deadline_us = self
            .now_us()
            .saturating_add(crate::common::saturating_us(timeout));
        loop {
            if done() {
                return true;
            }
            if self.now_us() >= deadline_us {
                return false;
            }
            self.driver.idle(poll);
        }
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
        let bytes = encode_declaration(self.config.topic_subgroups, &self.config.dare, &merged)?;
        if self.deleted.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted("the participant was deleted".into()));
        }
        self.driver.declare(bytes.clone())?;
        let me = self.me();
        tracing::debug!(
            node = me,
            subgroups = merged.len(),
            "declared: waiting for a view"
        );
        self.wait_until(
            self.timeout(),
            |_| {
                format!(
                    "no view carried this participant's entities within {} ms",
                    self.config.entity_timeout_ms
                )
            },
            |st| {
                let carried = st.view.as_ref().is_some_and(|v| {
                    v.declared.get(&me).map_or(&[][..], |d| d) == bytes.as_slice()
                });
                carried && ready(st)
            },
        )
    }

    /// Waits for the engine to hand out the sender of `sg` (after the view's re-sends).
    pub(crate) fn wait_sender(&self, sg: SubgroupId) -> Result<()> {
        if self.poll_until(self.timeout(), SENDER_POLL, || self.sender(sg).is_ok()) {
            Ok(())
        } else {
            Err(Error::Timeout(format!("no sender for subgroup {sg}")))
        }
    }

    pub(crate) fn add_interest(&self, id: u32, sg: SubgroupId, i: Interest) {
        lock(&self.interests).insert(id, (sg, i));
    }

    pub(crate) fn remove_interest(&self, id: u32) -> bool {
        lock(&self.interests).remove(&id).is_some()
    }

    /// True while writers or readers remain.
    pub(crate) fn has_entities(&self) -> bool {
        lock(&self.interests).keys().any(|id| *id != BUILTIN_ENTITY)
    }

    /// Joins the built-in subgroup as reader and writer ([`crate::discovery`]) and waits
    /// until this participant holds the table and may announce.
    pub(crate) fn join_builtin(&self) -> Result<()> {
        self.add_interest(
            BUILTIN_ENTITY,
            BUILTIN_SUBGROUP,
            Interest {
                reader: true,
                writer: true,
                level: DeliveryLevel::VolatileStore,
                window_slots: BUILTIN_WINDOW_SLOTS,
                slot_payload_bytes: discovery::ANNOUNCEMENT_BYTES_MAX,
                store_depth: 1,
                sample_bytes_max: 0,
                dare: false,
                large_window: crate::declare::LARGE_WINDOW_MESSAGES,
                outlives_writers: false,
            },
        );
        // A previous incarnation of this node (a process restarted with the same id)
        // may have left endpoints in the table: they are gone with it.
        self.enter_builtin(&[])
    }

    /// Once this participant is a member: declares its interests, waits until it may
    /// announce on the built-in topic, then announces `keep` (its own readers and
    /// writers) and withdraws every other endpoint the table holds under its node id
    /// (a previous incarnation's).
    fn enter_builtin(&self, keep: &[Endpoint]) -> Result<()> {
        let me = self.me();
        self.redeclare(|st| {
            st.subgroups
                .get(&BUILTIN_SUBGROUP)
                .is_some_and(|d| d.spec.senders.contains(&me))
                && !st.awaiting_state.contains(&BUILTIN_SUBGROUP)
        })?;
        self.check_topic_subgroups()?;
        self.wait_sender(BUILTIN_SUBGROUP)?;
        let stale: Vec<Endpoint> = self
            .own_endpoints()
            .into_iter()
            .filter(|e| !keep.iter().any(|k| k.entity == e.entity))
            .collect();
        for e in stale {
            self.announce(e, false)?;
        }
        for e in keep {
            self.announce(e.clone(), true)?;
        }
        Ok(())
    }

    /// The endpoints the table holds under this participant's node id.
    fn own_endpoints(&self) -> Vec<Endpoint> {
        let me = self.me();
        lock(&self.shared.state)
            .endpoints
            .iter()
            .filter(|((node, _), _)| *node == me)
            .map(|(_, e)| e.clone())
            .collect()
    }

    /// Joins the domain again after the group went on without this participant
    /// ([`ParticipantConfig::rejoin`]): a new incarnation of the same node id on a fresh
    /// endpoint, joining through the members it knew; once a member, it declares its
    /// entities again, receives the stores' state like any joiner, and announces its
    /// readers and writers again (the others dropped them when it left their view).
    ///
    /// In two steps, each retried by the caller until it succeeds: with the old
    /// incarnation stopped, start the new one; with the new one running, finish joining.
    pub(crate) fn rejoin(&self) -> Result<()> {
        let me = self.me();
        if self.shared.stopped_flag.load(Ordering::Acquire) {
            // The endpoints this participant had, as the table held them (kept from an
            // earlier try whose new incarnation stopped in turn).
            let own = self.own_endpoints();
            let mut kept = lock(&self.rejoin_endpoints);
            for e in own {
                if !kept.iter().any(|k| k.entity == e.entity) {
                    kept.push(e);
                }
            }
            drop(kept);
            self.driver.rejoin(&self.shared, &self.config)?;
        }
        self.wait_until(
            self.timeout(),
            |_| {
                format!(
                    "node {me} did not rejoin domain {} within {} ms",
                    self.domain_id, self.config.entity_timeout_ms
                )
            },
            |st| st.view.is_some(),
        )?;
        // What the built-in state shipped of this node but it no longer has is gone.
        let own = lock(&self.rejoin_endpoints).clone();
        self.enter_builtin(&own)?;
        lock(&self.rejoin_endpoints).clear();
        self.shared.rejoining.store(false, Ordering::Release);
        Ok(())
    }

    /// Refuses to go on in a domain whose first member hashes topics onto a different
    /// number of subgroups: the two would put the same topic in different subgroups.
    fn check_topic_subgroups(&self) -> Result<()> {
        let mine = self.config.topic_subgroups;
        let domain = lock(&self.shared.state)
            .view
            .as_ref()
            .and_then(domain_topic_subgroups);
        match domain {
            Some((node, theirs)) if theirs != mine => Err(Error::PreconditionNotMet(format!(
                "topic_subgroups = {mine} in this participant's configuration, but participant \
                 {node}, the domain's first member, hashes topics onto {theirs}: every \
                 participant of a domain must set the same topic_subgroups"
            ))),
            _ => Ok(()),
        }
    }

    /// Announces `e` (`alive`, or deleted) on the built-in topic and waits until this
    /// participant delivered the announcement: every member applies it at the same place
    /// in the built-in topic's total order.
    pub(crate) fn announce(&self, e: Endpoint, alive: bool) -> Result<()> {
        let me = self.me();
        let bytes = discovery::encode(me, &e, alive);
        let mut failed = None;
        let sent = self.poll_until(self.timeout(), ANNOUNCE_POLL, || {
            match self
                .sender(BUILTIN_SUBGROUP)
                .and_then(|s| s.try_send(&bytes))
            {
                Ok(_) => true,
                Err(
                    spindle_group::Error::WindowFull { .. } | spindle_group::Error::Wedged { .. },
                ) => false,
                Err(other) => {
                    failed = Some(other);
                    true
                }
            }
        });
        if let Some(e) = failed {
            return Err(e.into());
        }
        if !sent {
            return Err(Error::Timeout(format!(
                "announcing entity {} within {} ms",
                e.entity, self.config.entity_timeout_ms
            )));
        }
        self.wait_until(
            self.timeout(),
            |_| {
                format!(
                    "entity {} was not announced back within {} ms",
                    e.entity, self.config.entity_timeout_ms
                )
            },
            |st| st.endpoints.get(&(me, e.entity)) == alive.then_some(&e),
        )
    }

    /// Announces an entity's endpoint again after a change other participants' matching
    /// reads (its PARTITION, its requested or offered QoS), and waits for its delivery
    /// here, under the entity's `announcing` lock, which its deletion's withdrawal takes
    /// too: no withdrawal comes before it in the built-in order, and an entity deleted
    /// first announces nothing. `change` makes the change under that lock and returns the
    /// endpoint to announce (`None`: nothing changed); `then` runs after the
    /// announcement, still under the lock, whatever its outcome.
    pub(crate) fn reannounce(
        &self,
        announcing: &Mutex<()>,
        deleted: &AtomicBool,
        change: impl FnOnce() -> Option<Endpoint>,
        then: impl FnOnce(),
    ) -> Result<()> {
        let _announcing = lock(announcing);
        if deleted.load(Ordering::Acquire) {
            return Ok(());
        }
        let Some(e) = change() else {
            return Ok(());
        };
        let announced = self.announce(e, true);
        then();
        announced
    }

    /// Moves `core` to the PARTITION `names` gives (read under its announcing lock, so
    /// of two moves the later one wins), announces it ([`ParticipantInner::reannounce`])
    /// and then lets it finish the move ([`Follower::moved`]). Nothing if they are its
    /// names already, or it was deleted.
    pub(crate) fn follow<C: Follower>(
        &self,
        core: &C,
        names: impl FnOnce() -> Partition,
    ) -> Result<()> {
        self.reannounce(
            core.announcing(),
            core.deleted(),
            || core.moved_to(names()),
            || core.moved(),
        )
    }

    /// A publisher's or subscriber's `set_qos`: `qos` replaces `current` once `checked`
    /// (given the old and the new QoS) accepts it, and every entity of `contained`
    /// follows to the new PARTITION (`partition` of the QoS then current).
    pub(crate) fn set_group_qos<Q, C: Follower>(
        &self,
        contained: &Contained<C>,
        current: &Mutex<Q>,
        qos: Q,
        checked: impl FnOnce(&Q, &Q) -> Result<()>,
        partition: impl Fn(&Q) -> Partition,
    ) -> Result<()> {
        contained.check()?;
        self.check_alive()?;
        {
            let mut q = lock(current);
            checked(&q, &qos)?;
            crate::common::announcing_allowed(partition(&q) != partition(&qos))?;
            *q = qos;
        }
        for core in contained.entities() {
            self.follow(&*core, || partition(&lock(current)))?;
        }
        Ok(())
    }

    /// Checks what every new writer or reader needs and returns its id and interest.
    pub(crate) fn new_entity<T: TopicType>(
        self: &Arc<Self>,
        topic: &TopicInner,
        qos: EntityLevel,
        reader: bool,
        store_depth: u16,
    ) -> Result<(u32, Interest)> {
        let level = qos.level;
        self.check_alive()?;
        if !Arc::ptr_eq(&topic.participant, self) {
            return Err(Error::BadParameter(
                "the topic belongs to another participant".into(),
            ));
        }
        check_level(&self.config, level, &topic.ident.name)?;
        let endpoints = lock(&self.shared.state).endpoints.len();
        if endpoints >= ENDPOINTS_MAX {
            return Err(Error::OutOfResources(format!(
                "topic {:?}: the domain holds {endpoints} readers and writers, at most \
                 ENDPOINTS_MAX = {ENDPOINTS_MAX} (what the built-in topic's store keeps \
                 for joiners; fixed, not a setting): delete some first",
                topic.ident.name
            )));
        }
        Ok((
            self.next_entity_id(),
            Interest {
                reader,
                writer: !reader,
                level,
                window_slots: self.config.window_slots,
                slot_payload_bytes: slot_bytes_for::<T>(&self.config),
                store_depth,
                sample_bytes_max: if reader {
                    0
                } else {
                    large_for::<T>(&self.config)
                },
                dare: !reader
                    && level == DeliveryLevel::Atomic
                    && self.config.atomic_ordering == crate::AtomicOrdering::Dare,
                // A reader's is the smallest: the writers' settings decide.
                large_window: if reader {
                    1
                } else {
                    self.config.large_window_messages
                },
                outlives_writers: qos.durability >= spindle_qos::DurabilityKind::Transient,
            },
        ))
    }
}

/// What a new reader's or writer's QoS asks of its subgroup: the delivery level, and the
/// DURABILITY kind (TRANSIENT and PERSISTENT keep the history beyond the writers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntityLevel {
    /// RELIABILITY and DURABILITY's level.
    pub(crate) level: DeliveryLevel,
    /// DURABILITY's kind.
    pub(crate) durability: spindle_qos::DurabilityKind,
}

/// Most readers and writers a domain holds: every one is an announcement the built-in
/// topic's store keeps for joiners, and the store keeps at most this many.
pub const ENDPOINTS_MAX: usize = crate::store::STORE_SAMPLES_MAX;

/// How long [`ParticipantInner::wait_sender`] lets pass between looks.
const SENDER_POLL: Duration = Duration::from_micros(200);

/// `PreconditionNotMet` for a PERSISTENT (LoggedStore) topic of a participant without a
/// `data_dir` to log it to.
pub(crate) fn check_level(
    config: &ParticipantConfig,
    level: DeliveryLevel,
    topic: &str,
) -> Result<()> {
    if level == DeliveryLevel::LoggedStore && config.data_dir.is_none() {
        return Err(Error::PreconditionNotMet(format!(
            "topic {topic:?}: DURABILITY PERSISTENT (the LoggedStore level) logs every \
             sample to the participant's data directory, and participant {} has none: set \
             data_dir in its configuration (or SPINDLE_DATA_DIR), or use TRANSIENT_LOCAL \
             (VolatileStore)",
            config.node_id
        )));
    }
    Ok(())
}

/// Slot payload bytes a writer or reader of `T` needs.
fn slot_bytes_for<T: TopicType>(cfg: &ParticipantConfig) -> usize {
    let need = T::MAX_SERIALIZED_SIZE.map_or(cfg.slot_payload_bytes, |m| {
        m.saturating_add(crate::sample::SAMPLE_HEADER_BYTES)
    });
    need.clamp(1, 64 * 1024)
}

/// The declared largest sample of a writer of `T` ([`Interest::large_for`]): none when
/// the type's bound fits the slot.
fn large_for<T: TopicType>(cfg: &ParticipantConfig) -> usize {
    let slot = slot_bytes_for::<T>(cfg);
    match T::MAX_SERIALIZED_SIZE {
        Some(m) if m.saturating_add(crate::sample::SAMPLE_HEADER_BYTES) <= slot => 0,
        _ => Interest::large_for(cfg.sample_bytes_max, slot),
    }
}

/// A topic's inner state: its participant, identity and QoS.
pub(crate) struct TopicInner {
    pub(crate) participant: Arc<ParticipantInner>,
    pub(crate) ident: Arc<TopicIdentity>,
    pub(crate) qos: TopicQos,
    /// The DDS type name (`T::TYPE_NAME`, or the one given for a raw CDR topic).
    pub(crate) type_name: String,
    /// A raw CDR topic's type described at run time, if it was given one
    /// (`create_cdr_topic_with_type`): what its filters and queries resolve against.
    pub(crate) dyn_type: Option<spindle_dynamic::DynType>,
}

/// A reader or writer as its subscriber's or publisher's `set_qos` moves it to other
/// PARTITION names ([`ParticipantInner::follow`]).
pub(crate) trait Follower {
    /// Held while its endpoint is announced again or withdrawn.
    fn announcing(&self) -> &Mutex<()>;
    /// Set once it is deleted.
    fn deleted(&self) -> &AtomicBool;
    /// Takes PARTITION `names`; its endpoint to announce, or `None` if they are its
    /// names already.
    fn moved_to(&self, names: Partition) -> Option<Endpoint>;
    /// Runs once the move is announced (whatever the announcement's outcome).
    fn moved(&self) {}
}

impl Follower for WriterCore {
    fn announcing(&self) -> &Mutex<()> {
        &self.announcing
    }
    fn deleted(&self) -> &AtomicBool {
        &self.deleted
    }
    fn moved_to(&self, names: Partition) -> Option<Endpoint> {
        WriterCore::moved_to(self, names)
    }
    /// Its samples carry the new names' tag from now on.
    fn moved(&self) {
        self.retag();
    }
}

impl Follower for ReaderCore {
    fn announcing(&self) -> &Mutex<()> {
        &self.announcing
    }
    fn deleted(&self) -> &AtomicBool {
        &self.deleted
    }
    fn moved_to(&self, names: Partition) -> Option<Endpoint> {
        ReaderCore::moved_to(self, names)
    }
}
