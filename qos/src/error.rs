//! Errors.

use crate::policy::QosPolicyId;

/// Why a QoS was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QosError {
    /// A policy's values are inconsistent on their own or with another policy of the same
    /// QoS (`INCONSISTENT_POLICY`).
    #[error("inconsistent {policy} policy: {detail}")]
    Inconsistent {
        /// The policy at fault.
        policy: QosPolicyId,
        /// What is wrong, naming the fields and their values.
        detail: String,
    },
    /// A policy that cannot change after the entity is enabled was changed
    /// (`IMMUTABLE_POLICY`).
    #[error("{policy} cannot be changed once the entity is enabled")]
    Immutable {
        /// The policy that differs.
        policy: QosPolicyId,
    },
}

impl QosError {
    /// The policy the error is about.
    pub fn policy(&self) -> QosPolicyId {
        match self {
            QosError::Inconsistent { policy, .. } | QosError::Immutable { policy } => *policy,
        }
    }
}

/// A result whose error is a [`QosError`].
pub type Result<T> = std::result::Result<T, QosError>;
