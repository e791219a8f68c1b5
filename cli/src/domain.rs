//! What `pub` and `sub` share: the participant from its TOML configuration, the topic's
//! type from IDL, and the QoS flags.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use spindle_dds_core::{DomainParticipant, DomainParticipantFactory, ParticipantConfig, Topic};
use spindle_dynamic::DynType;
use spindle_qos::{DataReaderQos, DataWriterQos, DomainParticipantQos, DurabilityKind, History};
use spindle_qos::{Reliability, TopicQos};
use spindle_topics::CdrSample;

use crate::Fail;

/// The participant and the topic: configuration, IDL, type and topic name.
#[derive(Debug, Args)]
pub struct TopicArgs {
    /// The participant's configuration (TOML: node_id, transport, listen, bootstrap,
    /// contacts …; see spindle_dds_core::ParticipantConfig). SPINDLE_* variables override it.
    #[arg(long, short = 'c')]
    pub config: PathBuf,
    /// The IDL file that defines the topic's type.
    #[arg(long)]
    pub idl: PathBuf,
    /// Include directory for the IDL's `#include`s (repeatable).
    #[arg(short = 'I', long = "include")]
    pub include: Vec<PathBuf>,
    /// The topic's type: a struct of the IDL, scoped (`Avionics::AirData`).
    #[arg(long = "type", short = 't')]
    pub type_name: String,
    /// The topic's name.
    #[arg(long)]
    pub topic: String,
    #[command(flatten)]
    pub qos: QosArgs,
}

/// RELIABILITY kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReliabilityArg {
    /// Every sample, in the topic's total order (atomic multicast).
    Reliable,
    /// No retransmission or blocking guarantees.
    BestEffort,
}

/// DURABILITY kinds on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DurabilityArg {
    /// Nothing kept for late joiners.
    Volatile,
    /// The writer's history kept for late joiners (a stored topic).
    TransientLocal,
    /// Kept for late joiners while any member of the domain keeps it (a stored topic).
    Transient,
    /// Kept on disk too, across a restart of the whole domain (a logged topic: needs
    /// `data_dir` in the participant's file).
    Persistent,
}

/// The QoS flags (topic, reader and writer QoS are built from them).
#[derive(Debug, Clone, Args)]
pub struct QosArgs {
    /// RELIABILITY.
    #[arg(long, value_enum, default_value = "reliable")]
    pub reliability: ReliabilityArg,
    /// DURABILITY.
    #[arg(long, value_enum, default_value = "volatile")]
    pub durability: DurabilityArg,
    /// HISTORY KEEP_LAST depth (KEEP_ALL when not given).
    #[arg(long)]
    pub history: Option<i32>,
    /// RELIABILITY max_blocking_time of a writer, seconds: how long a write waits for
    /// room (a view change stops writers until the next view is installed).
    #[arg(long, default_value_t = 10)]
    pub max_blocking_s: i64,
    /// PARTITION of the publisher or subscriber: a name, with `fnmatch` wildcards
    /// (`fleet/*`); repeat for several. None: the default partition.
    #[arg(long = "partition", value_name = "NAME")]
    pub partitions: Vec<String>,
}

impl QosArgs {
    /// The topic QoS.
    pub fn topic(&self) -> TopicQos {
        let mut q = TopicQos::default().with_reliability(match self.reliability {
            ReliabilityArg::Reliable => Reliability::reliable(),
            ReliabilityArg::BestEffort => Reliability::best_effort(),
        });
        q = q.with_durability(match self.durability {
            DurabilityArg::Volatile => DurabilityKind::Volatile,
            DurabilityArg::TransientLocal => DurabilityKind::TransientLocal,
            DurabilityArg::Transient => DurabilityKind::Transient,
            DurabilityArg::Persistent => DurabilityKind::Persistent,
        });
        q.with_history(match self.history {
            Some(d) => History::keep_last(d),
            None => History::keep_all(),
        })
    }

    /// The publisher's QoS: its PARTITION.
    pub fn publisher(&self) -> spindle_qos::PublisherQos {
        spindle_qos::PublisherQos {
            partition: self.partition(),
            ..Default::default()
        }
    }

    /// The subscriber's QoS: its PARTITION.
    pub fn subscriber(&self) -> spindle_qos::SubscriberQos {
        spindle_qos::SubscriberQos {
            partition: self.partition(),
            ..Default::default()
        }
    }

    fn partition(&self) -> spindle_qos::Partition {
        spindle_qos::Partition {
            name: self.partitions.clone(),
        }
    }

    /// A reader's QoS on a topic of QoS `topic`.
    pub fn reader(&self, topic: &TopicQos) -> DataReaderQos {
        DataReaderQos::from_topic_qos(topic)
    }

    /// Checks the QoS these flags make (topic, reader, writer) before the domain is
    /// joined: an inconsistent one is bad input, not a join followed by a refusal.
    pub fn check(&self) -> Result<(), Fail> {
        let tq = self.topic();
        let bad = |e: spindle_qos::QosError| {
            Fail::input(format!("--history/--max-blocking-s/--durability: {e}"))
        };
        tq.check().map_err(bad)?;
        self.reader(&tq).check().map_err(bad)?;
        self.writer(&tq).check().map_err(bad)
    }

    /// Checks that participant configuration `cfg` (from `path`) can give what the flags
    /// ask: PERSISTENT needs its `data_dir`.
    pub fn check_config(
        &self,
        cfg: &ParticipantConfig,
        path: &std::path::Path,
    ) -> Result<(), Fail> {
        if self.durability == DurabilityArg::Persistent && cfg.data_dir.is_none() {
            return Err(Fail::input(format!(
                "--durability persistent: {} sets no data_dir (where the topic's log is kept)",
                path.display()
            )));
        }
        Ok(())
    }

    /// A writer's QoS on a topic of QoS `topic`.
    pub fn writer(&self, topic: &TopicQos) -> DataWriterQos {
        DataWriterQos::from_topic_qos(topic)
            .with_max_blocking_time(spindle_qos::Duration::from_secs(self.max_blocking_s))
    }
}

/// Reads the type: bad IDL or an unknown type is bad input.
pub fn load_type(a: &TopicArgs) -> Result<DynType, Fail> {
    Ok(DynType::from_idl_file(&a.idl, &a.include, &a.type_name)?)
}

/// Reads the configuration (file, then SPINDLE_* overrides): errors are bad input.
pub fn load_config(path: &std::path::Path) -> Result<ParticipantConfig, Fail> {
    let mut cfg =
        ParticipantConfig::from_toml_file(path).map_err(|e| Fail::input(e.to_string()))?;
    cfg.apply_env(|k| std::env::var(k).ok())
        .map_err(|e| Fail::input(e.to_string()))?;
    cfg.validate(&path.display().to_string())
        .map_err(|e| Fail::input(e.to_string()))?;
    Ok(cfg)
}

/// Joins the domain.
pub fn join(cfg: &ParticipantConfig) -> Result<DomainParticipant, Fail> {
    let factory = DomainParticipantFactory::instance();
    factory
        .create_participant(cfg.domain_id, DomainParticipantQos::default(), cfg)
        .map_err(|e| match e {
            // The library's message already says which domain it was joining.
            spindle_dds_core::Error::Error(m) if m.starts_with("joining domain") => Fail::failed(m),
            other => Fail::failed(format!("joining domain {}: {other}", cfg.domain_id)),
        })
}

/// The raw CDR topic of the type.
pub fn topic(
    p: &DomainParticipant,
    a: &TopicArgs,
    t: &Arc<DynType>,
) -> Result<Topic<CdrSample>, Fail> {
    // With the run-time type, so content filters resolve against it (`spindle sub
    // --filter`).
    Ok(p.create_cdr_topic_with_type(&a.topic, t, a.qos.topic())?)
}
