//! Publishers (DDS `Publisher`): they create and delete writers, each one a declared
//! interest that a view change carries.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use spindle_qos::{DataWriterQos, PublisherQos};
use spindle_topics::TopicType;

use crate::common::lock;
use crate::error::{Error, Result};
use crate::group_scope::GroupScope;
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
    pub(crate) qos: PublisherQos,
    /// Its coherent set, under PRESENTATION `coherent_access` (shared by its clones
    /// and its writers).
    pub(crate) coherent: Option<Arc<CoherentSet>>,
    /// Its writers' topics, under PRESENTATION GROUP access scope (one subgroup).
    pub(crate) group: Option<Arc<GroupScope>>,
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
        if self.group.is_some() {
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
        if let Some(g) = &self.group {
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
            &self.qos,
            self.coherent.clone(),
        );
        if let Some(period) = core.deadline_us {
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
            if let Some(g) = &self.group {
                g.remove(id);
            }
            return Err(e);
        }
        let w = DataWriter::new(core, Arc::clone(&topic.inner));
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
        // While it can still send (the interest goes at the redeclaration below): its
        // instances end at every reader.
        writer.unregister_all();
        writer.core().deleted.store(true, Ordering::Release);
        if let Some(g) = &self.group {
            g.remove(id);
        }
        {
            let mut st = lock(&p.shared.state);
            p.shared.remove_writer(&mut st, id);
            st.own_delivered.remove(&id);
        }
        let endpoint = writer.core().endpoint();
        p.announce(endpoint, false)?;
        p.redeclare(|_| true)
    }
}
