//! Publishers (DDS `Publisher`): they create and delete writers, each one a declared
//! interest that a view change carries.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use spindle_qos::{DataWriterQos, Partition, PublisherQos};
use spindle_topics::TopicType;

use crate::common::lock;
use crate::contained::Contained;
use crate::discovery::partition_bytes;
use crate::error::{Error, Result};
use crate::inner::ParticipantInner;
use crate::sample::{encode_group_end, SampleKind};
use crate::shared::State;
use crate::topic::Topic;
use crate::writer::DataWriter;
use crate::writer_core::{CoherentSet, WriterCore};

/// The depth a store keeps per instance (0: all).
pub(crate) fn store_depth(history: &spindle_qos::History) -> u16 {
    match history.kind {
        spindle_qos::HistoryKind::KeepAll => 0,
        spindle_qos::HistoryKind::KeepLast => history.depth.clamp(1, i32::from(u16::MAX)) as u16,
    }
}

/// Creates writers (DDS `Publisher`).
#[derive(Clone)]
pub struct Publisher {
    pub(crate) participant: Arc<ParticipantInner>,
    /// Its QoS, shared by its clones (`set_qos` changes PARTITION and GROUP_DATA).
    pub(crate) qos: Arc<Mutex<PublisherQos>>,
    /// Its default writer QoS (DDS `set_default_datawriter_qos`), shared by its clones.
    pub(crate) default_writer: Arc<Mutex<DataWriterQos>>,
    /// Its coherent set, under PRESENTATION `coherent_access` (shared by its clones
    /// and its writers).
    pub(crate) coherent: Option<Arc<CoherentSet>>,
    /// Its writers (and their topics under PRESENTATION GROUP access scope), shared by
    /// its clones and listed by its participant.
    pub(crate) contained: Arc<Contained<WriterCore>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("qos", &self.qos).finish()
    }
}

impl Publisher {
    /// The publisher's QoS.
    pub fn qos(&self) -> PublisherQos {
        lock(&self.qos).clone()
    }

    /// Changes the QoS (DDS `set_qos`): PARTITION, GROUP_DATA and ENTITY_FACTORY may
    /// change after creation; a new PRESENTATION is `ImmutablePolicy`, an inconsistent
    /// QoS `InconsistentPolicy`, names past the announcement's room `BadParameter` (as at
    /// creation), new names `IllegalOperation` from a listener (the moves wait for
    /// announcements the delivery thread delivers). New PARTITION names move every writer of the publisher: each announces
    /// them, waits for the announcement's delivery here, and then tags what it writes
    /// with them. Readers whose partitions match the new names match the writers and
    /// take what they write from then on; readers that matched only the old names are
    /// unmatched, and still take what the writers wrote before the move (every reader
    /// judges a sample by the names it was written under, the same way at every
    /// participant; ARCHITECTURE.md, "PARTITION").
    pub fn set_qos(&self, qos: PublisherQos) -> Result<()> {
        self.participant.set_group_qos(
            &self.contained,
            &self.qos,
            qos,
            |old, new| {
                new.check()?;
                partition_bytes(&new.partition.name).map_err(Error::BadParameter)?;
                Ok(old.changeable_to(new)?)
            },
            |q| q.partition.clone(),
        )
    }

    /// The writer QoS this publisher gives as its default (DDS
    /// `get_default_datawriter_qos`; the specification's until
    /// [`Publisher::set_default_datawriter_qos`]). Pass it to
    /// [`Publisher::create_datawriter`] where DDS passes `DATAWRITER_QOS_DEFAULT`, or
    /// `DataWriterQos::from_topic_qos` for `DATAWRITER_QOS_USE_TOPIC_QOS`.
    pub fn default_datawriter_qos(&self) -> DataWriterQos {
        lock(&self.default_writer).clone()
    }

    /// Sets [`Publisher::default_datawriter_qos`] (DDS `set_default_datawriter_qos`):
    /// writers that exist keep their QoS. `InconsistentPolicy` if `qos` is inconsistent
    /// (nothing set).
    pub fn set_default_datawriter_qos(&self, qos: DataWriterQos) -> Result<()> {
        qos.check()?;
        *lock(&self.default_writer) = qos;
        Ok(())
    }

    /// Its PARTITION now.
    fn partition(&self) -> Partition {
        lock(&self.qos).partition.clone()
    }

    /// Opens a coherent set (DDS `begin_coherent_changes`, PRESENTATION `coherent_access`):
    /// what this publisher's writers write until [`Publisher::end_coherent_changes`]
    /// reaches each reader all at once or not at all — held back at the readers until the
    /// set ends, dropped by every reader alike if the writer fails first. Under TOPIC or
    /// INSTANCE scope each writer's part of the set is its own set; under GROUP scope the
    /// set spans all the publisher's writers (whose topics share one subgroup: see
    /// [`Publisher::create_datawriter`]) and ends at one position of the subgroup's total
    /// order for every reader of every topic in it. At most
    /// [`crate::sample::COHERENT_SET_SAMPLES_MAX`] samples per writer and
    /// [`crate::sample::GROUP_SET_WRITERS_MAX`] writers per set.
    /// `PreconditionNotMet` without `coherent_access` or with a set already open.
    pub fn begin_coherent_changes(&self) -> Result<()> {
        let set = self.coherent.as_ref().ok_or_else(|| {
            Error::PreconditionNotMet(
                "begin_coherent_changes: the publisher's PRESENTATION has no coherent_access"
                    .into(),
            )
        })?;
        if set.begin() {
            Ok(())
        } else {
            Err(Error::PreconditionNotMet(
                "begin_coherent_changes: a coherent set is already open".into(),
            ))
        }
    }

    /// Ends the open coherent set (DDS `end_coherent_changes`): each writer that wrote in
    /// it sends the set's end through its topic's order (TOPIC/INSTANCE scope), or one of
    /// them sends one end listing them all (GROUP scope), and readers take the set.
    /// `PreconditionNotMet` if no set is open.
    pub fn end_coherent_changes(&self) -> Result<()> {
        let ids = self
            .coherent
            .as_ref()
            .and_then(|s| s.end())
            .ok_or_else(|| {
                Error::PreconditionNotMet("end_coherent_changes: no coherent set is open".into())
            })?;
        let p = &self.participant;
        if self.contained.group.is_some() {
            // One end for the whole set, in the one subgroup its writers share: every
            // reader of any of its topics takes its part at that end, or (the participant
            // gone first) none does.
            let body = encode_group_end(&ids)?;
            let sender = {
                let st = lock(&p.shared.state);
                ids.iter().find_map(|id| st.writers.get(id).cloned())
            };
            return match sender {
                Some(core) => {
                    crate::writer::send_control_with(&core, p, SampleKind::GroupCoherentEnd, &body)
                }
                None if ids.is_empty() => Ok(()),
                None => Err(Error::AlreadyDeleted(format!(
                    "end_coherent_changes: every writer of the set ({ids:?}) was deleted; \
                     the set never ends"
                ))),
            };
        }
        for id in ids {
            let core = lock(&p.shared.state).writers.get(&id).cloned();
            if let Some(core) = core {
                crate::writer::send_control(&core, p, SampleKind::CoherentEnd)?;
            }
        }
        Ok(())
    }

    /// Creates a writer on `topic` and waits until the view carries it: when this
    /// returns, `write` reaches every reader the view holds. Under PRESENTATION GROUP
    /// access scope with `coherent_access` or `ordered_access`, `Unsupported` if `topic`
    /// rides another subgroup than the publisher's other writers' topics (naming both
    /// topics, their subgroups and `topic_subgroups`).
    pub fn create_datawriter<T: TopicType>(
        &self,
        topic: &Topic<T>,
        qos: DataWriterQos,
    ) -> Result<DataWriter<T>> {
        let p = &self.participant;
        let ident = &topic.inner.ident;
        let _span = tracing::info_span!(
            "create_datawriter",
            node = p.me(),
            topic = %ident.name,
            subgroup = ident.subgroup
        )
        .entered();
        self.contained.check()?;
        qos.check()?;
        let (id, interest) = p.new_entity::<T>(
            &topic.inner,
            crate::inner::EntityLevel {
                level: qos.delivery_level(),
                durability: qos.durability.kind,
            },
            false,
            store_depth(&qos.history),
        )?;
        let sg = topic.inner.ident.subgroup;
        if let Some(g) = &self.contained.group {
            g.admit(id, &ident.name, sg, p.config.topic_subgroups)?;
        }
        if let Some(h) = &lock(&p.shared.state).retention {
            if qos.delivery_level() == spindle_qos::DeliveryLevel::LoggedStore {
                crate::logged::widen_retention(h, sg, crate::logged::retention_of(&qos));
            }
        }
        let core = WriterCore::new(
            id,
            Arc::clone(&topic.inner.ident),
            qos,
            &self.qos(),
            self.coherent.clone(),
        );
        if let Some(period) = core.deadline_us() {
            p.shared.want_timer(period);
        }
        if let Some(lease) = core.manual_lease_us() {
            p.shared.want_timer(lease);
        }
        p.add_interest(id, sg, interest);
        lock(&p.shared.state).writers.insert(id, Arc::clone(&core));
        let me = p.me();
        let ready = |st: &State| {
            st.subgroups
                .get(&sg)
                .is_some_and(|d| d.spec.senders.contains(&me))
        };
        let endpoint = core.endpoint();
        if let Err(e) = p
            .redeclare(ready)
            .and_then(|_| p.wait_sender(sg))
            .and_then(|_| p.announce(endpoint, true))
        {
            p.remove_interest(id);
            p.shared.remove_writer(&mut lock(&p.shared.state), id);
            let _ = p.redeclare(|_| true);
            if let Some(g) = &self.contained.group {
                g.remove(id);
            }
            return Err(e);
        }
        self.contained.push(Arc::clone(&core));
        let w = DataWriter::new(Arc::clone(&core), Arc::clone(&topic.inner));
        // A `set_qos` that ran since its names were read did not see it: it follows.
        if let Err(e) = p.follow(&*core, || self.partition()) {
            let _ = self.delete_datawriter(w);
            return Err(e);
        }
        w.refresh_matched();
        Ok(w)
    }

    /// Deletes a writer: its instances end at every reader (unregistered, and disposed
    /// first under WRITER_DATA_LIFECYCLE `autodispose_unregistered_instances`), and the
    /// participant stops sending in its topic's subgroup (a view change) once no other
    /// writer of it remains. Any publisher of its participant may delete it (DDS asks
    /// for the one that created it, which Spindle does not make the caller keep).
    /// `AlreadyDeleted` if it was deleted; `PreconditionNotMet` if another participant
    /// created it.
    pub fn delete_datawriter<T: TopicType>(&self, writer: DataWriter<T>) -> Result<()> {
        delete_writer(&self.participant, &writer)?;
        self.participant.redeclare(|_| true)
    }

    /// Deletes every writer this publisher created (DDS `delete_contained_entities`), as
    /// [`Publisher::delete_datawriter`] deletes one, with one redeclaration for them all.
    /// The publisher itself stays.
    pub fn delete_contained_entities(&self) -> Result<()> {
        self.contained.check()?;
        delete_writers(&self.participant, &self.contained)?;
        self.participant.redeclare(|_| true)
    }
}

/// Deletes `writer`, one of participant `p`'s, from the publisher that created it and
/// announces its end (the caller redeclares the participant's interests).
fn delete_writer<T: TopicType>(p: &ParticipantInner, writer: &DataWriter<T>) -> Result<()> {
    let core = writer.core();
    let id = core.id;
    let contained = Contained::claim(&p.publishers, core, ("writer", id, &core.deleted), || {
        p.remove_interest(id)
    })?;
    // While it can still send (the interest goes at the redeclaration): its instances
    // end at every reader.
    writer.unregister_all();
    core.deleted.store(true, Ordering::Release);
    if let Some(g) = &contained.group {
        g.remove(id);
    }
    contained.remove(core);
    {
        let mut st = lock(&p.shared.state);
        p.shared.remove_writer(&mut st, id);
        st.own_delivered.remove(&id);
    }
    // Under its announcing lock: an announcement of a move (`set_qos`) already begun
    // comes before this withdrawal, and none begins after it.
    let _announcing = lock(&core.announcing);
    p.announce(core.endpoint(), false)
}

/// Deletes every writer of `contained` (the caller redeclares): what a publisher's or
/// its participant's `delete_contained_entities` does.
pub(crate) fn delete_writers(
    p: &Arc<ParticipantInner>,
    contained: &Contained<WriterCore>,
) -> Result<()> {
    for core in contained.entities() {
        delete_writer(p, &DataWriter::erased(core, p))?;
    }
    Ok(())
}
