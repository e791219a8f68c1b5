//! Topics (DDS `Topic`): a name, a type and a QoS, carried by one subgroup; and
//! content-filtered topics (DDS `ContentFilteredTopic`) over them.

use std::marker::PhantomData;
use std::sync::Arc;

use spindle_group::SubgroupId;
use spindle_qos::TopicQos;
use spindle_topics::TopicType;

use crate::content_filter::{ContentFilter, SharedFilter};
use crate::error::Result;
use crate::inner::TopicInner;

/// A topic of type `T` (DDS `Topic`). Cheap to clone.
pub struct Topic<T: TopicType> {
    pub(crate) inner: Arc<TopicInner>,
    _t: PhantomData<fn() -> T>,
}

impl<T: TopicType> Topic<T> {
    pub(crate) fn new(inner: Arc<TopicInner>) -> Topic<T> {
        Topic {
            inner,
            _t: PhantomData,
        }
    }
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
            .field("name", &self.inner.ident.name)
            .field("type", &self.inner.type_name)
            .field("subgroup", &self.inner.ident.subgroup)
            .finish()
    }
}

impl<T: TopicType> Topic<T> {
    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.inner.ident.name
    }
    /// The type's name.
    pub fn type_name(&self) -> &str {
        &self.inner.type_name
    }

    /// `INCONSISTENT_TOPIC_STATUS`: the readers and writers seen on a topic of this name
    /// with another type, or another definition of this type name (both sides knowing
    /// their type's structural hash, `TopicType::TYPE_HASH`, and the hashes differing),
    /// which this participant's do not match; reading it resets the change count.
    pub fn inconsistent_topic_status(&self) -> crate::status::InconsistentTopicStatus {
        let mut all = crate::common::lock(&self.inner.participant.shared.inconsistent);
        let Some(t) = all.get_mut(&self.inner.ident.topic_id) else {
            return Default::default();
        };
        let out = t.status;
        t.status.total_count_change = 0;
        out
    }
    /// The topic's QoS.
    pub fn qos(&self) -> &TopicQos {
        &self.inner.qos
    }
    /// The subgroup that carries it.
    pub fn subgroup(&self) -> SubgroupId {
        self.inner.ident.subgroup
    }
}

/// A topic whose readers see only the samples that pass a filter (DDS
/// `ContentFilteredTopic`), made by
/// [`DomainParticipant::create_contentfilteredtopic`](crate::DomainParticipant::create_contentfilteredtopic).
/// Readers created on it (`Subscriber::create_datareader`) filter on their side: every
/// sample of the related topic still reaches the reader's node, in the topic's total
/// order, and the reader keeps those that pass. Cheap to clone; clones share the filter.
pub struct ContentFilteredTopic<T: TopicType> {
    pub(crate) name: String,
    pub(crate) topic: Topic<T>,
    pub(crate) filter: SharedFilter,
}

impl<T: TopicType> Clone for ContentFilteredTopic<T> {
    fn clone(&self) -> Self {
        ContentFilteredTopic {
            name: self.name.clone(),
            topic: self.topic.clone(),
            filter: Arc::clone(&self.filter),
        }
    }
}

impl<T: TopicType> std::fmt::Debug for ContentFilteredTopic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentFilteredTopic")
            .field("name", &self.name)
            .field("topic", &self.topic.name())
            .field("filter", &self.filter)
            .finish()
    }
}

impl<T: TopicType> ContentFilteredTopic<T> {
    /// Its own name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The topic it filters (DDS `get_related_topic`).
    pub fn related_topic(&self) -> &Topic<T> {
        &self.topic
    }
    /// The filter expression (DDS `get_filter_expression`).
    pub fn get_filter_expression(&self) -> String {
        self.filter.expression()
    }
    /// The expression's parameters (DDS `get_expression_parameters`).
    pub fn get_expression_parameters(&self) -> Vec<String> {
        self.filter.parameters()
    }
    /// Replaces the parameters (DDS `set_expression_parameters`): samples delivered from
    /// now on, to every reader of this topic, are filtered with them; samples already
    /// in a reader's cache stay. `BadParameter` (nothing changed) if fewer are given than
    /// the expression names.
    pub fn set_expression_parameters(&self, parameters: &[String]) -> Result<()> {
        self.filter.set_parameters(parameters)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What a reader can be created on (DDS `TopicDescription`): a [`Topic`] or a
/// [`ContentFilteredTopic`]. Sealed.
pub trait TopicDescription: sealed::Sealed {
    /// The sample type.
    type Sample: TopicType;
    /// The topic whose samples it describes.
    fn topic(&self) -> &Topic<Self::Sample>;
    /// The content filter its readers apply, if any.
    fn content_filter(&self) -> Option<&Arc<ContentFilter>>;
}

impl<T: TopicType> sealed::Sealed for Topic<T> {}
impl<T: TopicType> sealed::Sealed for ContentFilteredTopic<T> {}

impl<T: TopicType> TopicDescription for Topic<T> {
    type Sample = T;
    fn topic(&self) -> &Topic<T> {
        self
    }
    fn content_filter(&self) -> Option<&Arc<ContentFilter>> {
        None
    }
}

impl<T: TopicType> TopicDescription for ContentFilteredTopic<T> {
    type Sample = T;
    fn topic(&self) -> &Topic<T> {
        &self.topic
    }
    fn content_filter(&self) -> Option<&Arc<ContentFilter>> {
        Some(&self.filter)
    }
}
