//! DCPS in simulation (feature `testkit`): every participant of a domain on the
//! deterministic sim fabric, in virtual time, on the caller's thread.
//!
//! A [`SimDomain`] holds a seeded [`SimWorld`] and, per participant, its [`Group`] and the
//! same delivery path a participant on threads has ([`crate::DdsApp`] and the DEADLINE
//! check). Participants are ordinary [`DomainParticipant`]s: topics, writers, readers,
//! listeners and QoS behave as on threads. Where a participant on threads would wait — for
//! a view to carry a new entity, for room in a full window, for readers — a simulated one
//! runs the domain one round instead: every live member's group handles its fabric events
//! and time-outs at virtual time, the outputs go to the delivery path, then the fabric
//! advances by a seeded amount. [`SimDomain::run_until`] runs rounds until the test's
//! condition holds. The same seed gives the same run: [`SimDomain::trace_hash`] hashes
//! every delivery and timer of the fabric.
//!
//! Drive a simulated domain from one thread: rounds are serialized, but two application
//! threads would interleave them in an order the seed does not fix. Listeners run inside a
//! round, as on the delivery thread: they may read and take, and write while the window
//! has room.
//!
//! ```
//! use spindle_dds_core::sim::SimDomain;
//! use spindle_dds_core::StateMask;
//! use spindle_qos::{DataReaderQos, DataWriterQos, Reliability, TopicQos};
//! use spindle_topics::KeyedString;
//!
//! let domain = SimDomain::new(7);
//! let a = domain.participant(1)?;
//! let b = domain.participant(2)?; // joins: a view change, in virtual time
//! let qos = TopicQos::default().with_reliability(Reliability::reliable());
//! let ta = a.create_topic::<KeyedString>("greetings", qos.clone())?;
//! let tb = b.create_topic::<KeyedString>("greetings", qos.clone())?;
//! let reader = b
//!     .create_subscriber(Default::default())?
//!     .create_datareader(&tb, DataReaderQos::from_topic_qos(&qos))?;
//! let writer = a
//!     .create_publisher(Default::default())?
//!     .create_datawriter(&ta, DataWriterQos::default())?;
//! writer.write(&KeyedString { key: "k".into(), value: "hello".into() })?;
//! let mut got = Vec::new();
//! assert!(domain.run_until(10_000, || {
//!     got.extend(reader.take(10, StateMask::ANY).unwrap_or_default());
//!     !got.is_empty()
//! }));
//! assert_eq!(got[0].data.as_ref().map(|d| d.value.as_str()), Some("hello"));
//! # Ok::<(), spindle_dds_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use spindle_group::persist::Persister;
use spindle_group::runtime::{drive, hand_to, Application, Handed};
use spindle_group::testkit::{SimCluster, SimNode};
use spindle_group::{Group, GroupOutput, Sender, SubgroupId};
use spindle_qos::DomainParticipantQos;
use spindle_transport_rdma::sim::{SimConfig, SimEndpoint, SimWorld};
use spindle_transport_rdma::{FabricConfig, NodeId};

use crate::clock::Clock;
use crate::common::{lock, on_delivery_thread, set_delivery_thread};
use crate::config::{Contact, ParticipantConfig, Transport};
use crate::delivery::{handle_timeout, DdsApp};
use crate::error::{Error, Result};
use crate::inner::ParticipantInner;
use crate::participant::{make_group, DomainParticipant};
use crate::shared::{Driver, Shared, State};

/// Virtual time a round advances the fabric by, at most (µs); the seed picks each step.
pub const ROUND_STEP_US_MAX: u64 = 200;
/// The Unix time virtual time 0 stands for (ns): 2026-01-01T00:00:00Z.
pub const SIM_EPOCH_NS: i64 = 1_767_225_600_000_000_000;

/// Virtual time, as the participants of a [`SimDomain`] read it.
#[derive(Debug, Default)]
struct SimClock {
    now_us: AtomicU64,
}

impl Clock for SimClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::Acquire)
    }

    fn wall_ns(&self) -> i64 {
        SIM_EPOCH_NS.saturating_add((self.now_us() as i64).saturating_mul(1_000))
    }
}

/// What a participant's handles and the rounds share, outside the domain's lock (a
/// listener inside a round may ask for a sender).
#[derive(Default)]
struct MemberLink {
    senders: Mutex<BTreeMap<SubgroupId, Sender>>,
    declare: Mutex<Option<Vec<u8>>>,
    leave: AtomicBool,
    /// Stopped: crashed, closed, shut down or left.
    done: AtomicBool,
    /// The group member's counters, as the predicate thread publishes them.
    counters: spindle_group::counters::CounterCells,
}

impl MemberLink {
    /// The participant is gone: it no longer runs, and hands out no sender.
    fn end(&self) {
        self.done.store(true, Ordering::Release);
        lock(&self.senders).clear();
    }
}

struct Member {
    ep: Arc<SimEndpoint>,
    group: Group,
    /// The logs of a participant with a `data_dir` (a real directory; a plain crash loses
    /// nothing, [`SimDomain::crash_with_disk`] what a power failure would).
    persister: Option<Persister>,
    /// The group commit runs every this many steps ([`SimDomain::set_disk_sync_every`]).
    sync_every_steps: u64,
    steps: u64,
    app: DdsApp,
    shared: Arc<Shared>,
    link: Arc<MemberLink>,
    carry: spindle_group::counters::EngineCarry,
}

/// A participant's step in a round: its declaration and leave go to the group, the group
/// runs ([`spindle_group::runtime::drive`]), its outputs go to the delivery path
/// ([`hand_to`]), its senders are published, DEADLINE is checked.
impl SimNode for Member {
    fn is_live(&self) -> bool {
        !self.link.done.load(Ordering::Acquire)
    }

    fn step(&mut self, now_us: u64, _scratch: &mut Vec<u8>) -> bool {
        if self.link.leave.swap(false, Ordering::AcqRel) {
            self.group.leave();
        }
        if let Some(d) = lock(&self.link.declare).take() {
            if let Err(e) = self.group.declare(d) {
                tracing::error!(error = %e, "sim: declaration refused");
            }
        }
        let mut work = drive(&mut self.group, &*self.ep, now_us);
        while let Some(out) = self.group.poll() {
            work = true;
            if let Some(p) = &mut self.persister {
                if let Err(e) = p.record(&out) {
                    tracing::error!(error = %e, "sim: logged store: logging stops");
                    self.persister = None;
                }
            }
            if let GroupOutput::InstallState { state, .. } = &out {
                self.link.counters.state_received(state.len());
            }
            match hand_to(&mut self.group, &mut self.app, out) {
                Handed::Stopped => self.link.done.store(true, Ordering::Release),
                Handed::StateGiven { bytes } => self.link.counters.state_given(bytes),
                _ => {}
            }
        }
        if work {
            self.app.round_end();
            self.carry.publish(&self.group, &self.link.counters);
        }
        self.steps += 1;
        if let Some(p) = self
            .persister
            .as_mut()
            .filter(|_| self.steps % self.sync_every_steps == 0)
        {
            // The group commit of the round, as the predicate thread's per pass.
            let app = &mut self.app;
            match p.commit(&mut self.group, |f| app.persisted(f)) {
                Ok(synced) => work |= synced,
                Err(e) => {
                    tracing::error!(error = %e, "sim: logged store: logging stops");
                    self.persister = None;
                }
            }
        }
        if self.group.is_done() {
            self.link.done.store(true, Ordering::Release);
        }
        let mut senders = lock(&self.link.senders);
        senders.clear();
        if !self.link.done.load(Ordering::Acquire) {
            let ids: Vec<SubgroupId> = self
                .group
                .layout()
                .map(|l| l.subgroups.iter().map(|s| s.id).collect())
                .unwrap_or_default();
            for sg in ids {
                if let Ok(s) = self.group.sender(sg) {
                    senders.insert(sg, s);
                }
            }
        }
        drop(senders);
        if self.shared.timer_tick_us().is_some() {
            handle_timeout(&self.shared, now_us);
        }
        work
    }
}

struct Core {
    /// The project's simulation harness, over this domain's participants.
    cluster: SimCluster<Member>,
    clock: Arc<SimClock>,
    /// Steps between two group commits of a new participant's logs.
    sync_every_steps: u64,
}

impl Core {
    /// One round: every live participant steps, as on its delivery thread; then virtual
    /// time advances.
    fn round(&mut self) {
        set_delivery_thread(true);
        self.cluster.round();
        set_delivery_thread(false);
        self.clock
            .now_us
            .store(self.cluster.now_us(), Ordering::Release);
    }
}

/// A simulated domain. See the module docs.
#[derive(Clone)]
pub struct SimDomain {
    core: Arc<Mutex<Core>>,
    world: SimWorld,
    clock: Arc<SimClock>,
    seed: u64,
}

impl std::fmt::Debug for SimDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimDomain")
            .field("seed", &self.seed)
            .field("now_us", &self.clock.now_us())
            .finish()
    }
}

impl SimDomain {
    /// An empty domain whose every random choice (link delays, round steps) follows
    /// `seed`.
    pub fn new(seed: u64) -> SimDomain {
        let world = SimWorld::new(
            seed,
            SimConfig {
                link_delay_min_us: 1,
                link_delay_max_us: 1 + seed % 100,
                failure_detection_us: 2_000,
                delay_spike_per_million: 0,
                delay_spike_max_us: 0,
                fabric: FabricConfig {
                    probe_interval_ms: 5,
                    suspect_floor_ms: 20,
                    suspect_ceiling_ms: 20,
                    ..FabricConfig::default()
                },
                link_rate_bytes_per_s: None,
            },
        );
        let clock = Arc::new(SimClock::default());
        SimDomain {
            core: Arc::new(Mutex::new(Core {
                cluster: SimCluster::new(world.clone(), seed ^ 0xDC95, 0..ROUND_STEP_US_MAX),
                clock: Arc::clone(&clock),
                sync_every_steps: 1,
            })),
            world,
            clock,
            seed,
        }
    }

    /// The seed (print it with every failure).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The simulated fabric, for faults (partitions, pauses) beyond [`SimDomain::crash`].
    pub fn world(&self) -> &SimWorld {
        &self.world
    }

    /// Virtual time now, in µs.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Rounds run so far.
    pub fn rounds(&self) -> u64 {
        lock(&self.core).cluster.rounds()
    }

    /// Hash of every delivery and timer of the fabric so far: equal for equal seeds and
    /// equal test code.
    pub fn trace_hash(&self) -> u64 {
        self.world.trace_hash()
    }

    /// A new participant `node` with the default configuration; the first one of the
    /// domain starts it, later ones join through every member so far. Returns once its
    /// first view is installed.
    pub fn participant(&self, node: NodeId) -> Result<DomainParticipant> {
        self.participant_with(node, DomainParticipantQos::default(), |_| {})
    }

    /// As [`SimDomain::participant`], with the configuration adjusted by `tune`.
    pub fn participant_with(
        &self,
        node: NodeId,
        qos: DomainParticipantQos,
        tune: impl FnOnce(&mut ParticipantConfig),
    ) -> Result<DomainParticipant> {
        if on_delivery_thread() {
            return Err(Error::IllegalOperation(
                "participants cannot be created from a listener".into(),
            ));
        }
        let ep = self.world.endpoint(node);
        let address = spindle_transport_rdma::Endpoint::address(&*ep);
        let mut config = ParticipantConfig::new(node, Transport::Tcp, address.clone());
        {
            let core = lock(&self.core);
            if core.cluster.nodes.contains_key(&node) {
                return Err(Error::PreconditionNotMet(format!(
                    "node {node} is already a participant of the simulated domain"
                )));
            }
            let live: Vec<Contact> = core
                .cluster
                .nodes
                .iter()
                .filter(|(_, m)| !m.link.done.load(Ordering::Acquire))
                .map(|(id, m)| Contact {
                    node: *id,
                    address: spindle_transport_rdma::Endpoint::address(&*m.ep),
                })
                .collect();
            if live.is_empty() {
                config.bootstrap = vec![node];
            } else {
                config.contacts = live;
            }
        }
        tune(&mut config);
        config.validate("simulated participant configuration")?;
        // No restart protocol in simulation (it runs before the group, over a blocking
        // loop): a participant with logs begins above its own last logged view.
        let logs = crate::logged::open_logs(&config)?;
        let last_vid = logs.as_ref().and_then(|(_, v)| *v);
        let group = make_group(&config, &*ep, last_vid, None)?;
        let clock: Arc<dyn Clock> = self.clock.clone();
        let shared = Shared::new(node, clock);
        let persister = match logs {
            Some((mut p, _)) => {
                lock(&shared.state).retention = Some(p.retention());
                lock(&shared.state).recovered = crate::logged::read_back(&mut p)?;
                Some(p)
            }
            None => None,
        };
        let link = Arc::new(MemberLink::default());
        let mut core = lock(&self.core);
        let core_sync_every = core.sync_every_steps;
        core.cluster.nodes.insert(
            node,
            Member {
                ep,
                group,
                persister,
                sync_every_steps: core_sync_every,
                steps: 0,
                app: DdsApp::new(Arc::clone(&shared)),
                shared: Arc::clone(&shared),
                link: Arc::clone(&link),
                carry: Default::default(),
            },
        );
        drop(core);
        let driver = SimDriver {
            domain: self.clone(),
            node,
            link,
        };
        DomainParticipant::with_driver(ParticipantInner::new(
            0,
            qos,
            config,
            Box::new(driver),
            shared,
            address,
        ))
    }

    /// Runs one round. See the module docs.
    pub fn round(&self) {
        lock(&self.core).round();
    }

    /// Runs rounds until `done` holds (checked before each) or `rounds_max` rounds ran;
    /// true if it holds.
    pub fn run_until(&self, rounds_max: u64, mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..rounds_max {
            if done() {
                return true;
            }
            self.round();
        }
        done()
    }

    /// Runs rounds until `us` of virtual time passed.
    pub fn run_for(&self, us: u64) {
        let until = self.now_us().saturating_add(us);
        while self.now_us() < until {
            self.round();
        }
    }

    /// Crashes participant `node`: its process is gone (no goodbye); the others remove it
    /// by a view change once the fabric reports the failure.
    pub fn crash(&self, node: NodeId) {
        let core = lock(&self.core);
        if let Some(m) = core.cluster.nodes.get(&node) {
            m.link.end();
        }
        core.cluster.world.crash(node);
    }

    /// Participants created from now on run the group commit of their logs (append, then
    /// one sync) every `steps` steps instead of every step (at least 1), so that a crash
    /// ([`SimDomain::crash_with_disk`]) finds writes not yet synced: the batching a busy
    /// predicate thread does.
    pub fn set_disk_sync_every(&self, steps: u64) {
        lock(&self.core).sync_every_steps = steps.max(1);
    }

    /// Crashes participant `node` and its machine with it: as [`SimDomain::crash`], and
    /// its logs (if it has a `data_dir`) lose what was not synced — the simulated disk
    /// ([`spindle_log::Log::crash`]): each subgroup's log keeps its synced bytes, then
    /// what `torn` says of the unsynced ones (a prefix, and garbage after it). Returns
    /// what each log kept. A participant with no logs, or stopped already, loses nothing
    /// more.
    pub fn crash_with_disk(
        &self,
        node: NodeId,
        torn: impl FnMut(SubgroupId) -> spindle_log::TornWrite,
    ) -> Result<Vec<(SubgroupId, spindle_log::CrashImage)>> {
        let persister = {
            let mut core = lock(&self.core);
            let persister = core.cluster.nodes.get_mut(&node).and_then(|m| {
                m.link.end();
                m.persister.take()
            });
            core.cluster.world.crash(node);
            persister
        };
        match persister {
            Some(p) => p
                .crash(torn)
                .map_err(|e| Error::Error(format!("simulated disk of node {node}: {e}"))),
            None => Ok(Vec::new()),
        }
    }

    /// Restarts participant `node` as a new process would: its old incarnation (if still
    /// running) crashes, and a new participant with the same id joins the domain. Returns
    /// once its first view is installed.
    pub fn restart(&self, node: NodeId) -> Result<DomainParticipant> {
        {
            let mut core = lock(&self.core);
            if let Some(m) = core.cluster.nodes.remove(&node) {
                m.link.end();
            }
        }
        self.world.restart(node);
        self.participant(node)
    }

    /// `look` at participant `node`'s group (its view, layout, engine): what a test
    /// checks beyond the DCPS API, e.g. the settings a subgroup's engine runs with.
    /// `None` for a node that is not a participant of the domain. `look` runs with the
    /// domain locked: it must not call back into the domain.
    pub fn inspect_group<R>(&self, node: NodeId, look: impl FnOnce(&Group) -> R) -> Option<R> {
        lock(&self.core)
            .cluster
            .nodes
            .get(&node)
            .map(|m| look(&m.group))
    }

    /// True once participant `node` stopped (crashed, closed, shut down or left).
    pub fn is_stopped(&self, node: NodeId) -> bool {
        lock(&self.core)
            .cluster
            .nodes
            .get(&node)
            .is_none_or(|m| m.link.done.load(Ordering::Acquire))
    }
}

/// The [`Driver`] of a simulated participant.
struct SimDriver {
    domain: SimDomain,
    node: NodeId,
    link: Arc<MemberLink>,
}

impl Driver for SimDriver {
    fn sender(&self, subgroup: SubgroupId) -> spindle_group::Result<Sender> {
        if self.link.done.load(Ordering::Acquire) {
            return Err(spindle_group::Error::Stopped);
        }
        lock(&self.link.senders)
            .get(&subgroup)
            .cloned()
            .ok_or(spindle_group::Error::Wedged { subgroup })
    }

    fn declare(&self, declared: Vec<u8>) -> Result<()> {
        if self.link.done.load(Ordering::Acquire) {
            return Err(Error::AlreadyDeleted("the participant was deleted".into()));
        }
        if declared.len() > spindle_group::DECLARED_BYTES_MAX {
            return Err(Error::OutOfResources(format!(
                "a declaration of {} bytes, at most {}",
                declared.len(),
                spindle_group::DECLARED_BYTES_MAX
            )));
        }
        *lock(&self.link.declare) = Some(declared);
        Ok(())
    }

    fn leave(&self, timeout: Duration) {
        self.link.leave.store(true, Ordering::Release);
        if on_delivery_thread() {
            return;
        }
        let until = self
            .domain
            .now_us()
            .saturating_add(crate::common::saturating_us(timeout));
        while !self.link.done.load(Ordering::Acquire) && self.domain.now_us() < until {
            self.domain.round();
        }
        self.stop();
    }

    fn stop(&self) {
        if !self.link.done.swap(true, Ordering::AcqRel) {
            self.domain.crash(self.node);
        }
    }

    fn wait_changed<'a>(
        &self,
        shared: &'a Shared,
        st: MutexGuard<'a, State>,
        _max: Duration,
    ) -> MutexGuard<'a, State> {
        drop(st);
        self.domain.round();
        lock(&shared.state)
    }

    fn group_counters(&self) -> spindle_group::NodeCounters {
        self.link.counters.read()
    }

    fn idle(&self, _hint: Duration) {
        self.domain.round();
    }

    fn wait_room(&self, _sender: &Sender, _len: usize, _max: Duration) {
        self.domain.round();
    }
}
