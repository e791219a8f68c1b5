//! The rules behind the entity QoS `check()` methods.

use crate::error::QosError;
use crate::policy::{
    Deadline, DurabilityService, History, HistoryKind, Partition, QosPolicyId, ResourceLimits,
    TimeBasedFilter, LENGTH_UNLIMITED,
};
use crate::time::Duration;

/// Collects violations in the order they are found.
pub(crate) type Violations = Vec<QosError>;

fn push(out: &mut Violations, policy: QosPolicyId, detail: String) {
    out.push(QosError::Inconsistent { policy, detail });
}

/// A limit the specification allows: at least 1, or [`LENGTH_UNLIMITED`].
fn valid_limit(v: i32) -> bool {
    v >= 1 || v == LENGTH_UNLIMITED
}

/// A duration must not be negative, and its nanoseconds must be below one second.
pub(crate) fn duration(out: &mut Violations, policy: QosPolicyId, field: &str, d: Duration) {
    if d.is_negative() {
        push(out, policy, format!("{field} {d} is negative"));
    }
    if d.nanosec >= 1_000_000_000 {
        push(
            out,
            policy,
            format!(
                "{field} nanosec {} is out of range (must be below 1000000000)",
                d.nanosec
            ),
        );
    }
}

/// `KEEP_LAST` depth and its bound by `max_samples_per_instance`. `prefix` names the
/// fields in the detail.
fn depth_rules(
    out: &mut Violations,
    policy: QosPolicyId,
    depth_field: &str,
    kind: HistoryKind,
    depth: i32,
    per_instance_field: &str,
    per_instance: i32,
) {
    if kind != HistoryKind::KeepLast {
        return;
    }
    if depth < 1 {
        push(
            out,
            policy,
            format!("{depth_field} {depth} must be at least 1 for KEEP_LAST"),
        );
    } else if per_instance >= 1 && depth > per_instance {
        push(
            out,
            policy,
            format!("{depth_field} {depth} exceeds {per_instance_field} {per_instance}"),
        );
    }
}

/// Each limit valid, and `max_samples` not below `max_samples_per_instance`.
fn limit_rules(out: &mut Violations, policy: QosPolicyId, prefix: &str, limits: [i32; 3]) {
    let [max_samples, max_instances, per_instance] = limits;
    for (name, v) in [
        ("max_samples", max_samples),
        ("max_instances", max_instances),
        ("max_samples_per_instance", per_instance),
    ] {
        if !valid_limit(v) {
            push(
                out,
                policy,
                format!("{prefix}.{name} {v} must be at least 1 or LENGTH_UNLIMITED (-1)"),
            );
        }
    }
    if max_samples >= 1 && per_instance >= 1 && max_samples < per_instance {
        push(
            out,
            policy,
            format!(
                "{prefix}.max_samples {max_samples} is less than \
                 {prefix}.max_samples_per_instance {per_instance}"
            ),
        );
    }
}

/// `HISTORY` against `RESOURCE_LIMITS` (reported as `HISTORY`).
pub(crate) fn history(out: &mut Violations, history: &History, limits: &ResourceLimits) {
    depth_rules(
        out,
        QosPolicyId::History,
        "history depth",
        history.kind,
        history.depth,
        "resource_limits.max_samples_per_instance",
        limits.max_samples_per_instance,
    );
}

/// `RESOURCE_LIMITS` on its own.
pub(crate) fn resource_limits(out: &mut Violations, limits: &ResourceLimits) {
    limit_rules(
        out,
        QosPolicyId::ResourceLimits,
        "resource_limits",
        [
            limits.max_samples,
            limits.max_instances,
            limits.max_samples_per_instance,
        ],
    );
}

/// `DURABILITY_SERVICE`: the history and limit rules on its own fields, and a
/// non-negative cleanup delay.
pub(crate) fn durability_service(out: &mut Violations, ds: &DurabilityService) {
    let policy = QosPolicyId::DurabilityService;
    duration(
        out,
        policy,
        "durability_service.service_cleanup_delay",
        ds.service_cleanup_delay,
    );
    depth_rules(
        out,
        policy,
        "durability_service.history_depth",
        ds.history_kind,
        ds.history_depth,
        "durability_service.max_samples_per_instance",
        ds.max_samples_per_instance,
    );
    limit_rules(
        out,
        policy,
        "durability_service",
        [
            ds.max_samples,
            ds.max_instances,
            ds.max_samples_per_instance,
        ],
    );
}

/// `TIME_BASED_FILTER`: non-negative, and not longer than the `DEADLINE` period.
pub(crate) fn time_based_filter(out: &mut Violations, tbf: &TimeBasedFilter, deadline: &Deadline) {
    let policy = QosPolicyId::TimeBasedFilter;
    duration(
        out,
        policy,
        "time_based_filter.minimum_separation",
        tbf.minimum_separation,
    );
    if tbf.minimum_separation > deadline.period {
        push(
            out,
            policy,
            format!(
                "time_based_filter.minimum_separation {} exceeds deadline.period {}",
                tbf.minimum_separation, deadline.period
            ),
        );
    }
}

/// `PARTITION`: no empty names.
pub(crate) fn partition(out: &mut Violations, partition: &Partition) {
    for (i, name) in partition.name.iter().enumerate() {
        if name.is_empty() {
            push(
                out,
                QosPolicyId::Partition,
                format!("partition.name[{i}] is an empty string"),
            );
        }
    }
}
