//! Participants (DDS `DomainParticipant`) and the factory that makes them: one member
//! of the domain's top-level group each.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spindle_group::restart::Plan;
use spindle_group::{Group, LocalFabric, View};
use spindle_qos::{DomainParticipantQos, PublisherQos, SubscriberQos, TopicQos};
use spindle_topics::{CdrSample, TopicType};
use spindle_transport_rdma::{Endpoint, NodeId};

use crate::clock::{Clock, WallClock};
use crate::common::{lock, TopicIdentity};
use crate::config::{ParticipantConfig, Transport};
use crate::contained::Contained;
use crate::content_filter::ContentFilter;
use crate::declare::{subgroup_of, topic_id};
use crate::discovery::partition_bytes;
use crate::error::{Error, Result};
use crate::group_scope::GroupScope;
use crate::inner::{check_level, ParticipantInner, TopicInner};
use crate::logged;
use crate::publisher::Publisher;
use crate::shared::Shared;
use crate::subscriber::Subscriber;
use crate::threads::ThreadDriver;
use crate::topic::{ContentFilteredTopic, Topic};
use crate::writer_core::CoherentSet;

/// How long a participant that failed to rejoin its domain waits before it tries again
/// ([`ParticipantConfig::rejoin`]).
pub const REJOIN_RETRY_MS: u64 = 1_000;
/// How often the rejoin thread looks whether its participant stopped.
const REJOIN_POLL: Duration = Duration::from_millis(50);

/// The participant's group: bootstrapped with the other `bootstrap` members if it is one
/// of them (in the view after `logged_vid`, the last one its log holds, if any), else
/// joining through its contacts.
pub(crate) fn make_group<L: LocalFabric + ?Sized>(
    config: &ParticipantConfig,
    local: &L,
    logged_vid: Option<u32>,
    restarted: Option<Plan>,
) -> Result<Group> {
    let me = config.node_id;
    let gcfg = crate::declare::dds_group_config(config.domain_id);
    let group = if let Some(plan) = restarted {
        // The domain restarts after total failure in the view the restart leader chose.
        Group::bootstrap(local, plan.view, plan.addresses, gcfg, 0)?
    } else if config.bootstrap.contains(&me) {
        let mut addresses: BTreeMap<NodeId, String> = config
            .contacts
            .iter()
            .filter(|c| config.bootstrap.contains(&c.node))
            .map(|c| (c.node, c.address.clone()))
            .collect();
        addresses.insert(me, local.local_address());
        Group::bootstrap(
            local,
            View::new(
                logged_vid.map_or(1, |v| v.saturating_add(1)),
                config.bootstrap.clone(),
            ),
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
        Group::join(local, contacts, gcfg)?
    };
    Ok(group)
}

/// `msg` (a join's time-out), with why each contact's last link failed, if any did.
fn join_failures(msg: String, inner: &ParticipantInner) -> String {
    let failures = inner.driver.join_failures();
    if failures.is_empty() {
        return msg;
    }
    let contacts: Vec<String> = failures
        .iter()
        .map(|(node, why)| {
            let at = inner
                .config
                .contacts
                .iter()
                .find(|c| c.node == *node)
                .map_or(String::new(), |c| format!(" at {}", c.address));
            format!("contact node {node}{at}: {why}")
        })
        .collect();
    format!("{msg}; {}", contacts.join("; "))
}

/// How long a bootstrap member that joins instead waits for its first endpoint's
/// address to come free.
const REOPEN_WAIT_MS: u64 = 5_000;

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
        let start = |config: &ParticipantConfig| -> Result<DomainParticipant> {
            let ep = open_endpoint(config)?;
            let again = config.clone();
            let reopen: crate::threads::Reopen = Box::new(move || open_endpoint(&again));
            DomainParticipant::start_reopenable(
                domain_id,
                qos.clone(),
                config.clone(),
                ep,
                Some(reopen),
            )
        };
        match start(config) {
            // A bootstrap member started again while the others run the domain: its
            // first view (the bootstrap members) never gets their answers. It joins the
            // running domain through its contacts instead, as any other member would.
            Err(Error::Group(lost @ spindle_group::Error::LostMajority { .. }))
                if config.bootstrap.contains(&config.node_id)
                    && config.contacts.iter().any(|c| c.node != config.node_id) =>
            {
                let why = lost.to_string();
                tracing::warn!(
                    node = config.node_id,
                    %why,
                    "bootstrapping failed: joining the running domain through the contacts"
                );
                let mut joiner = config.clone();
                joiner.bootstrap.clear();
                // The first attempt's endpoint closes as its threads end: its address
                // comes free in a moment.
                let deadline = std::time::Instant::now() + Duration::from_millis(REOPEN_WAIT_MS);
                let mut joined = start(&joiner);
                while matches!(&joined, Err(Error::Transport(_)))
                    && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(50));
                    joined = start(&joiner);
                }
                joined.map_err(|e| {
                    Error::Error(format!(
                        "{why}; then, joining as a running domain's new member: {e}"
                    ))
                })
            }
            other => other,
        }
    }

    /// Deletes `participant`: it leaves the domain. `PreconditionNotMet` if it still has
    /// writers or readers.
    pub fn delete_participant(&self, participant: DomainParticipant) -> Result<()> {
        participant.delete()
    }
}

/// Opens the endpoint `config` describes.
fn open_endpoint(config: &ParticipantConfig) -> Result<Arc<dyn Endpoint>> {
    Ok(match config.transport {
        Transport::Tcp => spindle_transport_rdma::tcp::TcpEndpoint::open(
            config.node_id,
            &config.listen,
            config.fabric.clone(),
        )?,
        Transport::Shm => spindle_transport_rdma::shm::ShmEndpoint::open(
            config.node_id,
            &config.listen,
            config.fabric.clone(),
        )?,
        Transport::Libfabric | Transport::Verbs => crate::transport::open_rdma(config)?,
    })
}

/// The thread of a participant configured to rejoin: it waits for the group to go on
/// without the participant, then joins again ([`ParticipantInner::rejoin`]), retrying
/// every [`REJOIN_RETRY_MS`] until it succeeds. It ends with the participant (deleted,
/// or its last handle dropped).
fn spawn_rejoiner(weak: std::sync::Weak<ParticipantInner>) {
    let me = weak.upgrade().map(|p| p.me()).unwrap_or_default();
    let spawned = std::thread::Builder::new()
        .name(format!("spindle-rejoin-{me}"))
        .spawn(move || loop {
            std::thread::sleep(REJOIN_POLL);
            let Some(p) = weak.upgrade() else { return };
            if p.deleted.load(Ordering::Acquire) {
                return;
            }
            if !p.shared.rejoining.load(Ordering::Acquire) {
                continue;
            }
            if let Some(why) = lock(&p.shared.state).stopped.clone() {
                tracing::warn!(node = me, %why, "the group went on without this participant: rejoining");
            }
            match p.rejoin() {
                Ok(()) => {
                    let vid = lock(&p.shared.state).view.as_ref().map(|v| v.vid);
                    tracing::warn!(node = me, ?vid, "rejoined the domain as a new member");
                }
                Err(e) => {
                    tracing::warn!(node = me, error = %e, "rejoining failed; trying again");
                    drop(p);
                    std::thread::sleep(Duration::from_millis(REJOIN_RETRY_MS));
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "the rejoin thread did not start");
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
    /// configuration; tests may bring their own): its group runs on a predicate thread.
    pub fn start(
        domain_id: u32,
        qos: DomainParticipantQos,
        config: ParticipantConfig,
        ep: Arc<dyn Endpoint>,
    ) -> Result<DomainParticipant> {
        DomainParticipant::start_reopenable(domain_id, qos, config, ep, None)
    }

    /// As [`DomainParticipant::start`]; `reopen` opens a fresh endpoint for a participant
    /// that rejoins ([`ParticipantConfig::rejoin`], refused without it).
    fn start_reopenable(
        domain_id: u32,
        qos: DomainParticipantQos,
        config: ParticipantConfig,
        ep: Arc<dyn Endpoint>,
        reopen: Option<crate::threads::Reopen>,
    ) -> Result<DomainParticipant> {
        if config.rejoin && reopen.is_none() {
            return Err(Error::BadParameter(
                "rejoin = true: the participant must be created by the \
                 DomainParticipantFactory, which can open its endpoint again"
                    .into(),
            ));
        }
        let mut logs = logged::open_logs(&config)?;
        let last_vid = logs.as_ref().and_then(|(_, v)| *v);
        let mut restarted = None;
        let mut join_instead = false;
        if let Some((persister, _)) = logs
            .as_mut()
            .filter(|_| logged::restarts(&config, last_vid))
        {
            let rc = logged::restart_config(&config, &ep.address())?;
            match spindle_group::restart::run(&*ep, rc, persister) {
                Ok(plan) => restarted = Some(plan),
                Err(spindle_group::Error::Restart(why)) if logged::may_join(&config) => {
                    // The leader decided without this node (or answers no more: the
                    // domain runs). Join it as a new member: a join admits this node only
                    // into a running domain (nothing is invented), and the state transfer
                    // cuts from its log what the domain went on without.
                    tracing::warn!(node = config.node_id, %why, "restart: joining the domain instead");
                    join_instead = true;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let metrics = crate::metrics_http::bind(&config.metrics)?;
        let group = if join_instead {
            let mut joiner = config.clone();
            joiner.bootstrap.clear();
            make_group(&joiner, &*ep, last_vid, None)?
        } else {
            make_group(&config, &*ep, last_vid, restarted)?
        };
        // The process's wall clock calibrates its counter on its first read (under a
        // millisecond): here, not in the first `write`.
        let _ = WallClock.wall_ns();
        let shared = Shared::new(config.node_id, Arc::new(WallClock));
        shared
            .rejoin_enabled
            .store(config.rejoin, Ordering::Release);
        let persister = match logs {
            Some((mut p, _)) => {
                lock(&shared.state).retention = Some(p.retention());
                lock(&shared.state).recovered = logged::read_back(&mut p)?;
                Some(p)
            }
            None => None,
        };
        let driver = ThreadDriver::start(
            Arc::clone(&ep),
            group,
            &shared,
            spindle_group::runtime::Spin {
                before_park_us: config.spin_before_park_us,
                busy_yield_us: config.busy_yield_us,
                sched: config.thread_sched()?,
            },
            persister,
            reopen,
        )?;
        let p = DomainParticipant::with_driver(ParticipantInner::new(
            domain_id,
            qos,
            config,
            Box::new(driver),
            shared,
            ep.address(),
        ))?;
        if let Some(l) = metrics {
            *lock(&p.inner.metrics_address) = l.local_addr().ok();
            crate::metrics_http::serve(l, Arc::downgrade(&p.inner), p.node_id());
        }
        Ok(p)
    }

    /// The participant `inner` describes, once its first view is installed.
    pub(crate) fn with_driver(inner: ParticipantInner) -> Result<DomainParticipant> {
        let (me, domain_id) = (inner.me(), inner.domain_id);
        let inner = Arc::new(inner);
        let joined = inner
            .wait_until(
                inner.timeout(),
                |_| {
                    format!(
                        "node {me} did not join domain {domain_id} within {} ms",
                        inner.config.entity_timeout_ms
                    )
                },
                |st| st.view.is_some(),
            )
            .map_err(|e| match e {
                // What stood in the way, as the links to the contacts saw it.
                Error::Timeout(msg) => Error::Timeout(join_failures(msg, &inner)),
                other => other,
            })
            .and_then(|()| inner.join_builtin());
        if joined.is_err() {
            // However the failure reached this thread (a wait that saw the participant
            // stop, or a send the group refused), a first view that lost its majority is
            // reported as the group's typed reason, which the factory acts on (a
            // restarted bootstrap member joins instead).
            if let Some(lost @ spindle_group::Error::LostMajority { .. }) =
                inner.driver.stop_error()
            {
                inner.driver.stop();
                return Err(Error::Group(lost));
            }
        }
        match joined {
            Ok(()) => {
                if inner.config.rejoin {
                    spawn_rejoiner(Arc::downgrade(&inner));
                }
                Ok(DomainParticipant { inner })
            }
            Err(Error::PreconditionNotMet(why)) => {
                // Refused by the domain (a setting that must match): leave it cleanly, so
                // the members go on without waiting to suspect this node.
                inner.driver.leave(inner.timeout());
                Err(Error::Error(format!("joining domain {domain_id}: {why}")))
            }
            Err(e) => {
                inner.driver.stop();
                Err(e)
            }
        }
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

    /// Every reader and writer of the domain, as the built-in topic announced them
    /// ([`crate::discovery`]): `(participant's node, endpoint)`, sorted by node and entity,
    /// less those this participant ignores ([`DomainParticipant::ignore_participant`]).
    /// Topics appear as ids ([`crate::topic_id`] of their names): announcements carry no
    /// names. What `spindle status` shows as matched readers and writers.
    pub fn discovered_endpoints(&self) -> Vec<(NodeId, crate::discovery::Endpoint)> {
        let st = lock(&self.inner.shared.state);
        st.endpoints
            .iter()
            .filter(|(k, e)| !st.ignored.covers(k, e.reader))
            .map(|((node, _), e)| (*node, e.clone()))
            .collect()
    }

    /// The participants of the domain (DDS `get_discovered_participants`): the installed
    /// view's members, this one included, less those it ignores; sorted.
    pub fn discovered_participants(&self) -> Vec<NodeId> {
        let st = lock(&self.inner.shared.state);
        let mut members: Vec<NodeId> = st
            .view
            .as_ref()
            .map(|v| v.members.clone())
            .unwrap_or_default();
        members.retain(|m| !st.ignored.ignores_participant(*m));
        members.sort_unstable();
        members
    }

    /// The time on this participant's clock (DDS `get_current_time`), in ns since the
    /// Unix epoch: what `write` stamps samples with (virtual time in simulation,
    /// `sim::SIM_EPOCH_NS` at its start).
    pub fn current_time_ns(&self) -> i64 {
        self.inner.shared.clock.wall_ns()
    }

    /// Ignores participant `node` from now on (DDS `ignore_participant`; it cannot be
    /// undone): this participant's readers take no sample any of its writers sends after
    /// this returns (what they took already stays), and none of its readers or writers
    /// counts here in a matched, INCOMPATIBLE_QOS or INCONSISTENT_TOPIC status. A node id
    /// stays ignored when the node leaves and comes back. `node` may be this
    /// participant's own id: its readers then no longer take what its own writers write,
    /// the usual way to publish and subscribe one topic without hearing oneself. Others
    /// are not told: the domain's order and what their readers take are unchanged.
    /// `OutOfResources` past [`crate::IGNORED_MAX`] ignored participants, writers and
    /// readers together.
    pub fn ignore_participant(&self, node: NodeId) -> Result<()> {
        self.ignore(crate::shared::Ignore::Participant(node))
    }

    /// Ignores writer `writer` from now on (DDS `ignore_publication`), named as
    /// [`crate::DataReader::get_matched_publications`] or
    /// [`DomainParticipant::discovered_endpoints`] name it: as
    /// [`DomainParticipant::ignore_participant`] for one writer.
    pub fn ignore_publication(&self, writer: crate::discovery::EndpointKey) -> Result<()> {
        self.ignore(crate::shared::Ignore::Publication(writer))
    }

    /// Ignores reader `reader` from now on (DDS `ignore_subscription`): this
    /// participant's writers no longer count it matched (nor incompatible); what it takes
    /// is the reader's participant's business, unchanged.
    pub fn ignore_subscription(&self, reader: crate::discovery::EndpointKey) -> Result<()> {
        self.ignore(crate::shared::Ignore::Subscription(reader))
    }

    fn ignore(&self, what: crate::shared::Ignore) -> Result<()> {
        self.inner.check_alive()?;
        crate::delivery::ignore(&self.inner.shared, what)
    }

    /// Why the participant stopped (shut down by the view change protocol, or left).
    /// A participant the others excluded — it fell silent past their failure detector's
    /// bound: stopped, swapped out, cut off — learns it when it runs again, and the text
    /// says so ("excluded from the group in view V: node N suspected this node after M ms
    /// of silence"); its entities then fail with `AlreadyDeleted`.
    pub fn stopped(&self) -> Option<String> {
        lock(&self.inner.shared.state).stopped.clone()
    }

    /// Calls `on_stopped` once, with the reason [`DomainParticipant::stopped`] gives, when
    /// the participant stops (excluded, shut down by the view change protocol, or left);
    /// at once if it already has. It runs on the delivery thread. Replaces an earlier one.
    pub fn set_stopped_listener(&self, on_stopped: impl Fn(&str) + Send + Sync + 'static) {
        let l: crate::shared::StoppedListener =
            Arc::new((AtomicBool::new(false), Box::new(on_stopped)));
        *lock(&self.inner.shared.stopped_listener) = Some(Arc::clone(&l));
        if let Some(why) = self.stopped() {
            crate::shared::fire_stopped(&l, &why);
        }
    }

    /// Registers topic `name` of type `T` (DDS `create_topic`). Creating the same name
    /// again with the same type returns another handle to it; with another type, or
    /// another definition of the type name (`TopicType::TYPE_HASH`, when both are
    /// known), `PreconditionNotMet`. PERSISTENT (`LoggedStore`) needs the participant's
    /// `data_dir`.
    pub fn create_topic<T: TopicType>(&self, name: &str, qos: TopicQos) -> Result<Topic<T>> {
        if T::TYPE_NAME_AT_RUNTIME {
            return Err(Error::BadParameter(format!(
                "topic {name:?}: {} carries any type; create it with create_cdr_topic and \
                 the DDS type name",
                T::TYPE_NAME
            )));
        }
        self.register_topic(name, T::TYPE_NAME, qos, None)
    }

    /// Registers topic `name` of the DDS type `type_name` for samples moved as CDR bytes
    /// ([`CdrSample`]), without the type's Rust code: what a bridge to another DDS or a
    /// tool with run-time types uses. The topic is the same topic as a typed one of the
    /// same name and type name, in this participant and in every other: a typed writer's
    /// samples reach a raw reader as their encoding, and a raw writer's reach a typed
    /// reader decoded. Errors as [`DomainParticipant::create_topic`]; the type name must be
    /// 1 to 256 bytes. Without a run-time type the topic does not know its type's
    /// structure (unless this participant's topic of that name already does), so it is
    /// matched by the type name alone.
    ///
    /// ```
    /// use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask, Transport};
    /// use spindle_qos::{DataReaderQos, DomainParticipantQos, Reliability, TopicQos};
    /// use spindle_topics::{CdrSample, KeyedString, TopicType};
    ///
    /// let mut cfg = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
    /// cfg.bootstrap = vec![1];
    /// let factory = DomainParticipantFactory::instance();
    /// let p = factory.create_participant(0, DomainParticipantQos::default(), &cfg)?;
    /// // A typed writer and a raw reader on one topic.
    /// let typed = p.create_topic::<KeyedString>("greetings", TopicQos::default())?;
    /// let raw = p.create_cdr_topic("greetings", "DDS::KeyedString", TopicQos::default())?;
    /// let reader = p.create_subscriber(Default::default())?.create_datareader(
    ///     &raw,
    ///     DataReaderQos::default().with_reliability(Reliability::reliable()),
    /// )?;
    /// let writer = p.create_publisher(Default::default())?.create_datawriter(&typed, Default::default())?;
    /// let hello = KeyedString { key: "a".into(), value: "hello".into() };
    /// writer.write(&hello)?;
    /// let mut got = Vec::new();
    /// while got.is_empty() {
    ///     got = reader.take(10, StateMask::ANY)?;
    /// }
    /// let sample: &CdrSample = got[0].data.as_ref().expect("a sample, not a notice");
    /// assert_eq!(KeyedString::decode(sample.bytes())?, hello);
    /// assert_eq!(sample.key_hash_value(), hello.key_hash()?);
    /// p.close();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn create_cdr_topic(
        &self,
        name: &str,
        type_name: &str,
        qos: TopicQos,
    ) -> Result<Topic<CdrSample>> {
        if type_name.is_empty() || type_name.len() > 256 {
            return Err(Error::BadParameter(format!(
                "topic {name:?}: type name {type_name:?}: 1 to 256 bytes"
            )));
        }
        self.register_topic(name, type_name, qos, None)
    }

    /// [`DomainParticipant::create_cdr_topic`] for a type described at run time (a
    /// `spindle_dynamic::DynType`, e.g. read from an IDL file): samples are still moved as
    /// their CDR bytes, never decoded, but content-filtered topics and query conditions on
    /// it resolve their member names against `ty` and evaluate samples decoded by it (as
    /// a generated type's do). The DDS type name is `ty`'s, and so is the structural hash
    /// its readers and writers announce (`DynType::type_hash`): they match only endpoints
    /// of the same definition of that name, or ones that do not know theirs (a raw CDR
    /// topic made by [`DomainParticipant::create_cdr_topic`], a hand-written type).
    pub fn create_cdr_topic_with_type(
        &self,
        name: &str,
        ty: &spindle_dynamic::DynType,
        qos: TopicQos,
    ) -> Result<Topic<CdrSample>> {
        self.register_topic(name, ty.type_name(), qos, Some(ty.clone()))
    }

    /// Creates a topic named `name` whose readers see only the samples of `topic` that
    /// pass `expression` (DDS `create_contentfilteredtopic`; the filter language is
    /// [`crate::filter`], `%n` are `parameters`). Member names are resolved against the
    /// topic type's IDL now: `BadParameter` naming the byte for a bad expression or a
    /// member the type lacks, `Unsupported` for a type without IDL (a raw CDR topic made
    /// without a run-time type: see [`DomainParticipant::create_cdr_topic_with_type`]).
    /// Readers filter on their own side (ARCHITECTURE.md, "Content filters").
    ///
    /// ```
    /// # use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, Transport};
    /// # use spindle_qos::{DomainParticipantQos, TopicQos};
    /// # use spindle_topics::KeyedString;
    /// # let mut cfg = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
    /// # cfg.bootstrap = vec![1];
    /// # let p = DomainParticipantFactory::instance()
    /// #     .create_participant(0, DomainParticipantQos::default(), &cfg)?;
    /// let topic = p.create_topic::<KeyedString>("callsigns", TopicQos::default())?;
    /// let af = p.create_contentfilteredtopic("af-only", &topic, "key LIKE %0", &["'AF%'".into()])?;
    /// assert_eq!(af.get_filter_expression(), "key LIKE %0");
    /// let e = p.create_contentfilteredtopic("bad", &topic, "key LIKE", &[]).unwrap_err();
    /// assert_eq!(e.to_string(),
    ///     "bad parameter: filter expression at byte 8: expected a value, found the end");
    /// # p.close();
    /// # Ok::<(), spindle_dds_core::Error>(())
    /// ```
    pub fn create_contentfilteredtopic<T: TopicType>(
        &self,
        name: &str,
        topic: &Topic<T>,
        expression: &str,
        parameters: &[String],
    ) -> Result<ContentFilteredTopic<T>> {
        self.inner.check_alive()?;
        if name.is_empty() || name.len() > 256 {
            return Err(Error::BadParameter(format!(
                "content-filtered topic name {name:?}: 1 to 256 bytes"
            )));
        }
        if !Arc::ptr_eq(&topic.inner.participant, &self.inner) {
            return Err(Error::BadParameter(
                "the topic belongs to another participant".into(),
            ));
        }
        let filter = ContentFilter::of_type_name::<T>(
            &topic.inner.type_name,
            topic.inner.dyn_type.as_ref(),
            expression,
            parameters,
        )?;
        Ok(ContentFilteredTopic {
            name: name.to_string(),
            topic: topic.clone(),
            filter: Arc::new(filter),
        })
    }

    /// Registers a topic handle of type name `type_name` (shared by the creators). Its
    /// structural hash is `T::TYPE_HASH`, or for a raw CDR topic `dyn_type`'s; when
    /// that is unknown, the one this participant's topic of that name already has.
    fn register_topic<T: TopicType>(
        &self,
        name: &str,
        type_name: &str,
        qos: TopicQos,
        dyn_type: Option<spindle_dynamic::DynType>,
    ) -> Result<Topic<T>> {
        let _span =
            tracing::info_span!("create_topic", node = self.node_id(), topic = name).entered();
        self.inner.check_alive()?;
        if name.is_empty() || name.len() > 256 {
            return Err(Error::BadParameter(format!(
                "topic name {name:?}: 1 to 256 bytes"
            )));
        }
        qos.check()?;
        check_level(&self.inner.config, qos.delivery_level(), name)?;
        let own = if T::TYPE_NAME_AT_RUNTIME {
            dyn_type.as_ref().map(spindle_dynamic::DynType::type_hash)
        } else {
            T::TYPE_HASH
        }
        // 0 means "unknown" on the wire: never a hash here, so both sides read it alike.
        .filter(|h| *h != 0);
        let mut topics = lock(&self.inner.topics);
        let type_hash = if let Some((ty, _, count, known)) = topics.get_mut(name) {
            if ty != type_name {
                return Err(Error::PreconditionNotMet(format!(
                    "topic {name:?} exists with type {ty}, not {type_name}"
                )));
            }
            if let (Some(k), Some(o)) = (*known, own) {
                if k != o {
                    return Err(Error::PreconditionNotMet(format!(
                        "topic {name:?} exists with another definition of type {ty} \
                         (structural hash {k:#018x}, not {o:#018x})"
                    )));
                }
            }
            *known = known.or(own);
            *count += 1;
            *known
        } else {
            topics.insert(
                name.to_string(),
                (type_name.to_string(), qos.clone(), 1, own),
            );
            own
        };
        Ok(Topic::new(Arc::new(TopicInner {
            participant: Arc::clone(&self.inner),
            ident: Arc::new(TopicIdentity {
                name: name.to_string(),
                topic_id: topic_id(name),
                subgroup: subgroup_of(name, self.inner.config.topic_subgroups),
                type_id: crate::declare::type_id(type_name),
                type_hash,
                type_name: type_name.to_string(),
            }),
            qos,
            type_name: type_name.to_string(),
            dyn_type,
        })))
    }

    /// Finds a topic this participant created (DDS `find_topic`, local only); a raw CDR
    /// topic ([`CdrSample`]) is found whatever its DDS type name.
    pub fn find_topic<T: TopicType>(&self, name: &str) -> Result<Topic<T>> {
        let (type_name, qos) = lock(&self.inner.topics)
            .get(name)
            .map(|t| (t.0.clone(), t.1.clone()))
            .ok_or_else(|| Error::PreconditionNotMet(format!("no topic {name:?}")))?;
        let type_name = if T::TYPE_NAME_AT_RUNTIME {
            type_name
        } else {
            T::TYPE_NAME.to_string()
        };
        self.register_topic(name, &type_name, qos, None)
    }

    /// Deletes a topic handle (DDS `delete_topic`; each `create_topic` or `find_topic`
    /// of a name gives one): with the last one the participant forgets the topic.
    /// `PreconditionNotMet` for the last handle while a writer or reader of this
    /// participant uses the topic.
    pub fn delete_topic<T: TopicType>(&self, topic: Topic<T>) -> Result<()> {
        let name = &topic.inner.ident.name;
        let mut topics = lock(&self.inner.topics);
        if let Some((_, _, count, _)) = topics.get_mut(name) {
            if *count == 1 {
                let id = topic.inner.ident.topic_id;
                let st = lock(&self.inner.shared.state);
                let writers = st
                    .writers
                    .values()
                    .filter(|w| w.topic.topic_id == id)
                    .count();
                let readers = st.readers.get(&id).map_or(0, Vec::len);
                if writers + readers > 0 {
                    return Err(Error::PreconditionNotMet(format!(
                        "topic {name:?} still has {writers} writers and {readers} readers \
                         here; delete them first"
                    )));
                }
            }
            *count -= 1;
            if *count == 0 {
                topics.remove(&topic.inner.ident.name);
            }
        }
        Ok(())
    }

    /// Asserts the LIVELINESS of this participant's MANUAL_BY_PARTICIPANT writers
    /// (DDS `assert_liveliness`): each sends one assertion through its topic's subgroup.
    /// (Any write or assertion by any of its writers also renews them at the readers
    /// that receive it.)
    pub fn assert_liveliness(&self) -> Result<()> {
        self.inner.check_alive()?;
        let writers: Vec<_> = lock(&self.inner.shared.state)
            .writers
            .values()
            .filter(|w| w.liveliness == spindle_qos::LivelinessKind::ManualByParticipant)
            .cloned()
            .collect();
        for w in writers {
            crate::writer::send_control(&w, &self.inner, crate::sample::SampleKind::Liveliness)?;
        }
        Ok(())
    }

    /// The topic QoS this participant gives as its default (DDS `get_default_topic_qos`;
    /// the specification's until [`DomainParticipant::set_default_topic_qos`]). Pass it
    /// to [`DomainParticipant::create_topic`] where DDS passes `TOPIC_QOS_DEFAULT`.
    pub fn default_topic_qos(&self) -> TopicQos {
        lock(&self.inner.defaults).topic.clone()
    }

    /// Sets [`DomainParticipant::default_topic_qos`] (DDS `set_default_topic_qos`): what
    /// exists keeps its QoS. `InconsistentPolicy` if `qos` is inconsistent (nothing set).
    pub fn set_default_topic_qos(&self, qos: TopicQos) -> Result<()> {
        qos.check()?;
        lock(&self.inner.defaults).topic = qos;
        Ok(())
    }

    /// The publisher QoS this participant gives as its default, as
    /// [`DomainParticipant::default_topic_qos`].
    pub fn default_publisher_qos(&self) -> PublisherQos {
        lock(&self.inner.defaults).publisher.clone()
    }

    /// Sets [`DomainParticipant::default_publisher_qos`], as
    /// [`DomainParticipant::set_default_topic_qos`]; also `BadParameter` for PARTITION
    /// names past the announcement's room, as `create_publisher` would refuse them.
    pub fn set_default_publisher_qos(&self, qos: PublisherQos) -> Result<()> {
        qos.check()?;
        partition_bytes(&qos.partition.name).map_err(Error::BadParameter)?;
        lock(&self.inner.defaults).publisher = qos;
        Ok(())
    }

    /// The subscriber QoS this participant gives as its default, as
    /// [`DomainParticipant::default_topic_qos`].
    pub fn default_subscriber_qos(&self) -> SubscriberQos {
        lock(&self.inner.defaults).subscriber.clone()
    }

    /// Sets [`DomainParticipant::default_subscriber_qos`], as
    /// [`DomainParticipant::set_default_publisher_qos`].
    pub fn set_default_subscriber_qos(&self, qos: SubscriberQos) -> Result<()> {
        qos.check()?;
        partition_bytes(&qos.partition.name).map_err(Error::BadParameter)?;
        lock(&self.inner.defaults).subscriber = qos;
        Ok(())
    }

    /// A publisher (DDS `create_publisher`).
    pub fn create_publisher(&self, qos: PublisherQos) -> Result<Publisher> {
        self.inner.check_alive()?;
        qos.check()?;
        partition_bytes(&qos.partition.name).map_err(Error::BadParameter)?;
        let contained = Contained::new("publisher", GroupScope::of(&qos.presentation, "publisher"));
        lock(&self.inner.publishers).push(Arc::clone(&contained));
        Ok(Publisher {
            participant: Arc::clone(&self.inner),
            coherent: qos
                .presentation
                .coherent_access
                .then(|| Arc::new(CoherentSet::default())),
            contained,
            qos: Arc::new(Mutex::new(qos)),
            default_writer: Arc::default(),
        })
    }

    /// A subscriber (DDS `create_subscriber`).
    pub fn create_subscriber(&self, qos: SubscriberQos) -> Result<Subscriber> {
        self.inner.check_alive()?;
        qos.check()?;
        partition_bytes(&qos.partition.name).map_err(Error::BadParameter)?;
        let contained = Contained::new(
            "subscriber",
            GroupScope::of(&qos.presentation, "subscriber"),
        );
        lock(&self.inner.subscribers).push(Arc::clone(&contained));
        Ok(Subscriber {
            participant: Arc::clone(&self.inner),
            contained,
            accessing: Arc::default(),
            qos: Arc::new(Mutex::new(qos)),
            default_reader: Arc::default(),
        })
    }

    /// Deletes a publisher (DDS `delete_publisher`): `PreconditionNotMet` while it has
    /// writers (delete them, or all at once with
    /// [`Publisher::delete_contained_entities`]) or if another participant created it;
    /// `AlreadyDeleted` the second time. It creates nothing afterwards.
    pub fn delete_publisher(&self, publisher: Publisher) -> Result<()> {
        self.delete_container(
            &publisher.participant,
            &self.inner.publishers,
            &publisher.contained,
        )
    }

    /// Deletes a subscriber (DDS `delete_subscriber`), as
    /// [`DomainParticipant::delete_publisher`] deletes a publisher.
    pub fn delete_subscriber(&self, subscriber: Subscriber) -> Result<()> {
        self.delete_container(
            &subscriber.participant,
            &self.inner.subscribers,
            &subscriber.contained,
        )
    }

    fn delete_container<C>(
        &self,
        owner: &Arc<ParticipantInner>,
        list: &Mutex<Vec<Arc<Contained<C>>>>,
        contained: &Arc<Contained<C>>,
    ) -> Result<()> {
        if !Arc::ptr_eq(owner, &self.inner) {
            return Err(Error::PreconditionNotMet(format!(
                "the {} belongs to another participant",
                contained.whose
            )));
        }
        contained.delete()?;
        lock(list).retain(|c| !Arc::ptr_eq(c, contained));
        Ok(())
    }

    /// Deletes everything this participant created (DDS `delete_contained_entities`):
    /// every writer and reader (as `delete_datawriter` and `delete_datareader` do, with
    /// one redeclaration for them all), then its publishers and subscribers (their
    /// handles then fail with `AlreadyDeleted`) and its topics ([`find_topic`] no longer
    /// finds them). Afterwards the participant may be deleted
    /// ([`DomainParticipantFactory::delete_participant`]) or create anew.
    ///
    /// [`find_topic`]: DomainParticipant::find_topic
    pub fn delete_contained_entities(&self) -> Result<()> {
        self.inner.check_alive()?;
        let publishers = lock(&self.inner.publishers).clone();
        let subscribers = lock(&self.inner.subscribers).clone();
        for c in &publishers {
            crate::publisher::delete_writers(&self.inner, c)?;
        }
        for c in &subscribers {
            crate::subscriber::delete_readers(&self.inner, c)?;
        }
        self.inner.redeclare(|_| true)?;
        for c in &publishers {
            self.delete_container(&self.inner, &self.inner.publishers, c)?;
        }
        for c in &subscribers {
            self.delete_container(&self.inner, &self.inner.subscribers, c)?;
        }
        lock(&self.inner.topics).clear();
        Ok(())
    }

    /// Leaves the domain. `PreconditionNotMet` while writers or readers exist.
    pub fn delete(self) -> Result<()> {
        if self.inner.has_entities() {
            return Err(Error::PreconditionNotMet(
                "the participant still has writers or readers; delete them first".into(),
            ));
        }
        self.mark_deleted();
        self.inner.driver.leave(self.inner.timeout());
        Ok(())
    }

    /// Stops this participant's thread without leaving the domain (as a crash would:
    /// the others remove it by a view change).
    pub fn close(self) {
        self.mark_deleted();
        self.inner.driver.stop();
    }

    fn mark_deleted(&self) {
        self.inner.deleted.store(true, Ordering::Release);
        self.inner
            .shared
            .stopped_flag
            .store(true, Ordering::Release);
    }
}
