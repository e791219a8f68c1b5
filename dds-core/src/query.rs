//! Query conditions (DDS `QueryCondition`) and reads through a condition
//! (`read_w_condition`, `take_w_condition`).
//!
//! See [`QueryCondition`].

use std::sync::Arc;

use spindle_topics::TopicType;

use crate::common::lock;
use crate::condition::{notify_all, Condition};
use crate::content_filter::ContentFilter;
use crate::error::{Error, Result};
use crate::reader::{DataReader, ReadCondition};
use crate::reader_core::ReaderCore;
use crate::sample::{Sample, StateMask};

/// Holds while a reader has samples in the mask's states that pass an expression (DDS
/// `QueryCondition`).
///
/// A [`QueryCondition`] is a [`ReadCondition`] with a filter expression in the DDS filter
/// language ([`crate::filter`]), resolved against the reader's type like a
/// content-filtered topic's ([`crate::content_filter`]). It holds while the reader's
/// cache has a sample in its states whose data passes the expression (samples without
/// data, dispose and unregister notices, never do), so a [`crate::WaitSet`] wakes only
/// for those; `read_w_condition` / `take_w_condition` with it return only those. Unlike a
/// content filter, it keeps nothing out of the cache: the other samples stay there for
/// other reads. It evaluates every cached sample each time it is asked, decoding each
/// one: a cost proportional to the cache's depth, paid by the application's thread.
///
/// ```
/// # use spindle_dds_core::{DomainParticipantFactory, ParticipantConfig, StateMask, Transport};
/// # use spindle_qos::{DataReaderQos, DomainParticipantQos, Reliability, TopicQos};
/// # use spindle_topics::KeyedString;
/// # let mut cfg = ParticipantConfig::new(1, Transport::Tcp, "127.0.0.1:0");
/// # cfg.bootstrap = vec![1];
/// # let p = DomainParticipantFactory::instance()
/// #     .create_participant(0, DomainParticipantQos::default(), &cfg)?;
/// let topic = p.create_topic::<KeyedString>("q", TopicQos::default())?;
/// let reader = p.create_subscriber(Default::default())?
///     .create_datareader(&topic, DataReaderQos::default())?;
/// let q = reader.create_querycondition(StateMask::ANY, "value = %0", &["'on'".into()])?;
/// assert_eq!(q.get_query_expression(), "value = %0");
/// assert!(reader.take_w_condition(10, &*q)?.is_empty());
/// q.set_query_parameters(&["'off'".into()])?;
/// assert_eq!(q.get_query_parameters(), ["'off'"]);
/// # p.close();
/// # Ok::<(), spindle_dds_core::Error>(())
/// ```
pub struct QueryCondition {
    core: Arc<ReaderCore>,
    mask: StateMask,
    filter: ContentFilter,
}

impl std::fmt::Debug for QueryCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryCondition")
            .field("mask", &self.mask)
            .field("filter", &self.filter)
            .finish()
    }
}

impl QueryCondition {
    /// The expression (DDS `get_query_expression`).
    pub fn get_query_expression(&self) -> String {
        self.filter.expression()
    }

    /// The parameters (DDS `get_query_parameters`).
    pub fn get_query_parameters(&self) -> Vec<String> {
        self.filter.parameters()
    }

    /// Replaces the parameters (DDS `set_query_parameters`) and wakes waiting WaitSets,
    /// which re-evaluate it. `BadParameter` (nothing changed) if fewer are given than the
    /// expression names.
    pub fn set_query_parameters(&self, parameters: &[String]) -> Result<()> {
        self.filter.set_parameters(parameters)?;
        notify_all();
        Ok(())
    }

    /// The states it selects (sample, view and instance states).
    pub fn state_mask(&self) -> StateMask {
        self.mask
    }
}

impl Condition for QueryCondition {
    fn trigger_value(&self) -> bool {
        let pass = |b: &[u8]| self.filter.passes(b);
        lock(&self.core.cache).any_if(&self.mask, None, Some(&pass))
    }
}

/// What a read through a condition needs, opaque: the reader, the states, the query.
pub struct ConditionParts<'a> {
    core: &'a Arc<ReaderCore>,
    mask: StateMask,
    filter: Option<&'a ContentFilter>,
}

impl std::fmt::Debug for ConditionParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConditionParts")
            .field("reader", &self.core.id)
            .field("mask", &self.mask)
            .field("filter", &self.filter)
            .finish()
    }
}

/// A condition a reader can read or take through: a [`ReadCondition`] or a
/// [`QueryCondition`] made by that reader.
pub trait ReadConditionLike: Condition {
    /// Its parts (used by `read_w_condition` and `take_w_condition`).
    fn parts(&self) -> ConditionParts<'_>;
}

impl ReadConditionLike for ReadCondition {
    fn parts(&self) -> ConditionParts<'_> {
        ConditionParts {
            core: &self.core,
            mask: self.mask,
            filter: None,
        }
    }
}

impl ReadConditionLike for QueryCondition {
    fn parts(&self) -> ConditionParts<'_> {
        ConditionParts {
            core: &self.core,
            mask: self.mask,
            filter: Some(&self.filter),
        }
    }
}

impl<T: TopicType> DataReader<T> {
    /// A condition that holds while samples in the states of `mask` whose data pass
    /// `expression` (with `parameters`) are in the cache (DDS `create_querycondition`;
    /// `mask` carries the sample, view and instance states). Errors as
    /// [`crate::DomainParticipant::create_contentfilteredtopic`]'s.
    pub fn create_querycondition(
        &self,
        mask: StateMask,
        expression: &str,
        parameters: &[String],
    ) -> Result<Arc<QueryCondition>> {
        let filter = ContentFilter::of_type_name::<T>(
            &self.topic.type_name,
            self.topic.dyn_type.as_ref(),
            expression,
            parameters,
        )?;
        Ok(Arc::new(QueryCondition {
            core: Arc::clone(&self.core),
            mask,
            filter,
        }))
    }

    /// Reads up to `max` samples that `condition` selects, leaving them in the cache (DDS
    /// `read_w_condition`); `PreconditionNotMet` if another reader made it.
    pub fn read_w_condition(
        &self,
        max: usize,
        condition: &dyn ReadConditionLike,
    ) -> Result<Vec<Sample<T>>> {
        self.access_w_condition(max, condition, false)
    }

    /// Like [`DataReader::read_w_condition`], but removes the samples (DDS
    /// `take_w_condition`).
    pub fn take_w_condition(
        &self,
        max: usize,
        condition: &dyn ReadConditionLike,
    ) -> Result<Vec<Sample<T>>> {
        self.access_w_condition(max, condition, true)
    }

    fn access_w_condition(
        &self,
        max: usize,
        condition: &dyn ReadConditionLike,
        take: bool,
    ) -> Result<Vec<Sample<T>>> {
        let parts = condition.parts();
        if !Arc::ptr_eq(parts.core, &self.core) {
            return Err(Error::PreconditionNotMet(format!(
                "the condition belongs to reader {}, not to reader {}",
                parts.core.id, self.core.id
            )));
        }
        match parts.filter {
            Some(f) => {
                let pass = |b: &[u8]| f.passes(b);
                self.access_if(
                    max,
                    &parts.mask,
                    crate::reader::Pick::Any,
                    take,
                    Some(&pass),
                )
            }
            None => self.access_if(max, &parts.mask, crate::reader::Pick::Any, take, None),
        }
    }
}
