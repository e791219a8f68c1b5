//! Subscribers (DDS `Subscriber`): they create and delete readers, each one a declared
//! interest that a view change carries.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use spindle_qos::{DataReaderQos, Partition, SubscriberQos};
use spindle_topics::TopicType;

use crate::common::lock;
use crate::contained::Contained;
use crate::discovery::partition_bytes;
use crate::error::{Error, Result};
use crate::group_scope::order_by_position;
use crate::inner::ParticipantInner;
use crate::reader::{DataReader, ReaderHandle};
use crate::reader_core::ReaderCore;
use crate::sample::StateMask;
use crate::shared::State;
use crate::topic::TopicDescription;

/// Creates readers (DDS `Subscriber`).
#[derive(Clone)]
pub struct Subscriber {
    pub(crate) participant: Arc<ParticipantInner>,
    /// Its QoS, shared by its clones (`set_qos` changes PARTITION and GROUP_DATA).
    pub(crate) qos: Arc<Mutex<SubscriberQos>>,
    /// Its default reader QoS (DDS `set_default_datareader_qos`), shared by its clones.
    pub(crate) default_reader: Arc<Mutex<DataReaderQos>>,
    /// Its readers in creation order (and their topics under PRESENTATION GROUP access
    /// scope), shared by its clones and listed by its participant.
    pub(crate) contained: Arc<Contained<ReaderCore>>,
    /// `begin_access` calls not yet ended.
    pub(crate) accessing: Arc<AtomicU32>,
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
    pub fn qos(&self) -> SubscriberQos {
        lock(&self.qos).clone()
    }

    /// Changes the QoS (DDS `set_qos`): PARTITION, GROUP_DATA and ENTITY_FACTORY may
    /// change after creation; a new PRESENTATION is `ImmutablePolicy`, an inconsistent
    /// QoS `InconsistentPolicy`, names past the announcement's room `BadParameter` (as at
    /// creation), new names `IllegalOperation` from a listener (the moves wait for
    /// announcements the delivery thread delivers). New PARTITION names move every reader of the subscriber: from the
    /// moment it moves, a reader takes only samples written under names the new ones
    /// match (a sample already taken into its cache stays), and it announces them, so
    /// writers count it matched or not; this returns once every announcement is
    /// delivered here.
    pub fn set_qos(&self, qos: SubscriberQos) -> Result<()> {
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

    /// The reader QoS this subscriber gives as its default (DDS
    /// `get_default_datareader_qos`; the specification's until
    /// [`Subscriber::set_default_datareader_qos`]). Pass it to
    /// [`Subscriber::create_datareader`] where DDS passes `DATAREADER_QOS_DEFAULT`, or
    /// `DataReaderQos::from_topic_qos` for `DATAREADER_QOS_USE_TOPIC_QOS`.
    pub fn default_datareader_qos(&self) -> DataReaderQos {
        lock(&self.default_reader).clone()
    }

    /// Sets [`Subscriber::default_datareader_qos`] (DDS `set_default_datareader_qos`):
    /// readers that exist keep their QoS. `InconsistentPolicy` if `qos` is inconsistent
    /// (nothing set).
    pub fn set_default_datareader_qos(&self, qos: DataReaderQos) -> Result<()> {
        qos.check()?;
        *lock(&self.default_reader) = qos;
        Ok(())
    }

    /// Its PARTITION now.
    fn partition(&self) -> Partition {
        lock(&self.qos).partition.clone()
    }

    /// Opens an access to the samples of this subscriber's readers (DDS `begin_access`):
    /// under PRESENTATION GROUP access scope with `ordered_access`,
    /// [`Subscriber::get_datareaders`] may be called only between this and
    /// [`Subscriber::end_access`]. Accesses nest.
    pub fn begin_access(&self) -> Result<()> {
        self.participant.check_alive()?;
        self.accessing.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Closes the access [`Subscriber::begin_access`] opened (DDS `end_access`);
    /// `PreconditionNotMet` if none is open.
    pub fn end_access(&self) -> Result<()> {
        self.accessing
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| Error::PreconditionNotMet("end_access: no begin_access is open".into()))
    }

    /// The readers of this subscriber that hold samples matching `mask` (DDS
    /// `get_datareaders`). Under PRESENTATION GROUP access scope with `ordered_access`,
    /// the list names a reader once per such sample, in the one order of the
    /// subscriber's topics (they share one subgroup, so one total order): reading one
    /// sample with `mask` from each reader named, in turn (`read`/`take` with `max` 1),
    /// reads them all in that order — the same order at every participant. A coherent
    /// set's samples sit where the set ended. Call it between
    /// [`Subscriber::begin_access`] and [`Subscriber::end_access`] there
    /// (`PreconditionNotMet` otherwise). Without GROUP ordered access, each reader with
    /// such samples is named once, in creation order.
    pub fn get_datareaders(&self, mask: StateMask) -> Result<Vec<ReaderHandle>> {
        self.participant.check_alive()?;
        let readers = self.contained.entities();
        let handle = |r: &ReaderCore| ReaderHandle(r.id);
        if !(self.contained.group.is_some() && lock(&self.qos).presentation.ordered_access) {
            return Ok(readers
                .iter()
                .filter(|r| lock(&r.cache).any(&mask, None))
                .map(|r| handle(r))
                .collect());
        }
        if self.accessing.load(Ordering::Acquire) == 0 {
            return Err(Error::PreconditionNotMet(
                "get_datareaders: PRESENTATION GROUP ordered_access asks begin_access first".into(),
            ));
        }
        let positions: Vec<_> = readers
            .iter()
            .map(|r| lock(&r.cache).positions(&mask))
            .collect();
        Ok(order_by_position(&positions)
            .into_iter()
            .map(|i| handle(&readers[i]))
            .collect())
    }

    /// Creates a reader on `topic` (a [`Topic`](crate::Topic) or a
    /// [`ContentFilteredTopic`](crate::ContentFilteredTopic), whose filter the reader
    /// applies to every sample it receives) and waits until the view carries it: every
    /// sample written after this returns reaches it; on a store-level topic it also holds
    /// the stored history. Under PRESENTATION GROUP access scope with `coherent_access`
    /// or `ordered_access`, `Unsupported` if the topic rides another subgroup than the
    /// subscriber's other readers' topics (naming both topics, their subgroups and
    /// `topic_subgroups`).
    pub fn create_datareader<D: TopicDescription>(
        &self,
        description: &D,
        qos: DataReaderQos,
    ) -> Result<DataReader<D::Sample>> {
        type T<D> = <D as TopicDescription>::Sample;
        let topic = description.topic();
        let p = &self.participant;
        let ident = &topic.inner.ident;
        let _span = tracing::info_span!(
            "create_datareader",
            node = p.me(),
            topic = %ident.name,
            subgroup = ident.subgroup
        )
        .entered();
        self.contained.check()?;
        qos.check()?;
        // What a store keeps is the writers' history (TRANSIENT_LOCAL); a reader's own
        // HISTORY bounds only its cache.
        let (id, interest) = p.new_entity::<T<D>>(
            &topic.inner,
            crate::inner::EntityLevel {
                level: qos.delivery_level(),
                durability: qos.durability.kind,
            },
            true,
            1,
        )?;
        let sg = topic.inner.ident.subgroup;
        if let Some(g) = &self.contained.group {
            g.admit(id, &ident.name, sg, p.config.topic_subgroups)?;
        }
        let core = ReaderCore::new(
            id,
            Arc::clone(&topic.inner.ident),
            qos,
            Arc::clone(&p.shared.clock),
            &self.qos(),
            description.content_filter().cloned(),
        );
        if let Some(period) = core.deadline_us() {
            p.shared.want_timer(period);
        }
        {
            // Registered and primed from this node's store (if it already holds the
            // subgroup) under one lock, so no delivery is missed or seen twice.
            let mut st = lock(&p.shared.state);
            if let Some(store) = st.stores.get(&sg) {
                core.prime(
                    store,
                    &|w, tag| st.judging(w, tag),
                    &st.endpoints,
                    st.table_whole(),
                );
            }
            st.readers
                .entry(topic.inner.ident.topic_id)
                .or_default()
                .push(Arc::clone(&core));
        }
        p.add_interest(id, sg, interest);
        let me = p.me();
        let ready = |st: &State| st.history_held(sg, me);
        let endpoint = core.endpoint();
        if let Err(e) = p.redeclare(ready).and_then(|_| p.announce(endpoint, true)) {
            p.remove_interest(id);
            unregister_reader(p, &core);
            let _ = p.redeclare(|_| true);
            if let Some(g) = &self.contained.group {
                g.remove(id);
            }
            return Err(e);
        }
        self.contained.push(Arc::clone(&core));
        let r = DataReader::new(Arc::clone(&core), Arc::clone(&topic.inner));
        // A `set_qos` that ran since its names were read did not see it: it follows.
        if let Err(e) = p.follow(&*core, || self.partition()) {
            let _ = self.delete_datareader(r);
            return Err(e);
        }
        r.refresh_matched();
        Ok(r)
    }

    /// Deletes a reader. Any subscriber of its participant may delete it (DDS asks for
    /// the one that created it, which Spindle does not make the caller keep).
    /// `AlreadyDeleted` if it was deleted; `PreconditionNotMet` if another participant
    /// created it.
    pub fn delete_datareader<T: TopicType>(&self, reader: DataReader<T>) -> Result<()> {
        delete_reader(&self.participant, reader.core())?;
        self.participant.redeclare(|_| true)
    }

    /// Deletes every reader this subscriber created (DDS `delete_contained_entities`;
    /// their read and query conditions go with them), with one redeclaration for them
    /// all. The subscriber itself stays.
    pub fn delete_contained_entities(&self) -> Result<()> {
        self.contained.check()?;
        delete_readers(&self.participant, &self.contained)?;
        self.participant.redeclare(|_| true)
    }
}

/// Deletes `core`, one of participant `p`'s readers, from the subscriber that created it
/// and announces its end (the caller redeclares the participant's interests).
fn delete_reader(p: &ParticipantInner, core: &Arc<ReaderCore>) -> Result<()> {
    let id = core.id;
    let contained = Contained::claim(&p.subscribers, core, ("reader", id, &core.deleted), || {
        p.remove_interest(id)
    })?;
    core.deleted.store(true, Ordering::Release);
    unregister_reader(p, core);
    if let Some(g) = &contained.group {
        g.remove(id);
    }
    contained.remove(core);
    // Under its announcing lock, as a writer's (`publisher.rs`).
    let _announcing = lock(&core.announcing);
    p.announce(core.endpoint(), false)
}

/// Deletes every reader of `contained` (the caller redeclares): what a subscriber's or
/// its participant's `delete_contained_entities` does.
pub(crate) fn delete_readers(
    p: &ParticipantInner,
    contained: &Contained<ReaderCore>,
) -> Result<()> {
    for core in contained.entities() {
        delete_reader(p, &core)?;
    }
    Ok(())
}
fn unregister_reader(p: &ParticipantInner, core: &Arc<ReaderCore>) {
    let mut st = lock(&p.shared.state);
    if let Some(rs) = st.readers.get_mut(&core.topic.topic_id) {
        rs.retain(|r| !Arc::ptr_eq(r, core));
    }
    core.clear_listener();
}
