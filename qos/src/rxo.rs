//! Requested-versus-offered matching and partition matching.

use crate::entity::{DataReaderQos, DataWriterQos, PublisherQos, SubscriberQos};
use crate::policy::{Partition, QosPolicyId};

/// Every policy on which the offered side (`offered` writer in `publisher`) fails what the
/// requested side (`requested` reader in `subscriber`) asks for, in ascending id order;
/// empty means the two are compatible.
///
/// The rules are those of the DDS 1.4 request/offer table: `DURABILITY`,
/// `LIVELINESS` (kind), `RELIABILITY` and `DESTINATION_ORDER` kinds offered ≥ requested;
/// `PRESENTATION` access scope offered ≥ requested, and coherent/ordered access offered
/// whenever requested; `DEADLINE` period, `LATENCY_BUDGET` duration and `LIVELINESS`
/// lease offered ≤ requested; `OWNERSHIP` kinds equal. Partitions are not part of this
/// check (see [`partitions_match`]).
pub fn incompatible_policies(
    offered: &DataWriterQos,
    publisher: &PublisherQos,
    requested: &DataReaderQos,
    subscriber: &SubscriberQos,
) -> Vec<QosPolicyId> {
    let mut out = Vec::new();
    if offered.durability.kind < requested.durability.kind {
        out.push(QosPolicyId::Durability);
    }
    let (op, rp) = (&publisher.presentation, &subscriber.presentation);
    if op.access_scope < rp.access_scope
        || (rp.coherent_access && !op.coherent_access)
        || (rp.ordered_access && !op.ordered_access)
    {
        out.push(QosPolicyId::Presentation);
    }
    if offered.deadline.period > requested.deadline.period {
        out.push(QosPolicyId::Deadline);
    }
    if offered.latency_budget.duration > requested.latency_budget.duration {
        out.push(QosPolicyId::LatencyBudget);
    }
    if offered.ownership.kind != requested.ownership.kind {
        out.push(QosPolicyId::Ownership);
    }
    let (ol, rl) = (&offered.liveliness, &requested.liveliness);
    if ol.kind < rl.kind || ol.lease_duration > rl.lease_duration {
        out.push(QosPolicyId::Liveliness);
    }
    if offered.reliability.kind < requested.reliability.kind {
        out.push(QosPolicyId::Reliability);
    }
    if offered.destination_order.kind < requested.destination_order.kind {
        out.push(QosPolicyId::DestinationOrder);
    }
    out
}

/// Whether two `PARTITION` policies share a partition.
///
/// An empty name list stands for the default partition `""`. Two lists match if some
/// name of one matches some name of the other: equal strings always match; a name with
/// `fnmatch` wildcards (`*`, `?`, `[...]`, with `\` escaping the next character) matches
/// a plain name it describes; two wildcard names match only if they are equal strings.
pub fn partitions_match(a: &Partition, b: &Partition) -> bool {
    let (a, b) = (names(a), names(b));
    a.iter().any(|x| b.iter().any(|y| names_match(x, y)))
}

/// The names of a partition, with an empty list read as the default partition `""`.
fn names(p: &Partition) -> &[String] {
    const DEFAULT: &[String] = &[String::new()];
    if p.name.is_empty() {
        DEFAULT
    } else {
        &p.name
    }
}

/// Whether a partition name uses wildcards.
fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?', '['])
}

/// One name against another, per [`partitions_match`].
fn names_match(a: &str, b: &str) -> bool {
    match (is_pattern(a), is_pattern(b)) {
        (false, false) | (true, true) => a == b,
        (true, false) => glob_match(a, b),
        (false, true) => glob_match(b, a),
    }
}

/// `fnmatch`-style matching of `text` against `pattern`, in O(len(pattern) ×
/// len(text)) time: on a mismatch only the most recent `*` is retried, one character
/// further along.
fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // Pattern index just after the last `*`, and the text index that `*` resumes from.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p.get(pi) == Some(&'*') {
            pi += 1;
            star = Some((pi, ti));
            continue;
        }
        let Some(&c) = t.get(ti) else { break };
        if let Some(next) = match_one(&p, pi, c) {
            pi = next;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while p.get(pi) == Some(&'*') {
        pi += 1;
    }
    pi == p.len()
}

/// If the (non-`*`) pattern element at `pi` matches `c`, the index after it.
fn match_one(p: &[char], pi: usize, c: char) -> Option<usize> {
    match *p.get(pi)? {
        '?' => Some(pi + 1),
        '[' => match bracket(p, pi, c) {
            Some((true, next)) => Some(next),
            Some((false, _)) => None,
            // An unterminated `[` is an ordinary character.
            None => (c == '[').then_some(pi + 1),
        },
        '\\' => match p.get(pi + 1) {
            Some(&e) => (e == c).then_some(pi + 2),
            None => (c == '\\').then_some(pi + 1),
        },
        lit => (lit == c).then_some(pi + 1),
    }
}

/// Reads one escaped-or-plain character of a bracket expression at `j`.
fn class_char(p: &[char], j: usize) -> Option<(char, usize)> {
    match *p.get(j)? {
        '\\' => p.get(j + 1).map(|&e| (e, j + 2)),
        ch => Some((ch, j + 1)),
    }
}

/// The bracket expression starting at `p[pi] == '['` against `c`: whether it matches and
/// the index after its `]`; `None` if it has no closing `]`. Supports `!`/`^` negation,
/// ranges `a-z`, and `]` as the first member.
fn bracket(p: &[char], pi: usize, c: char) -> Option<(bool, usize)> {
    let mut j = pi + 1;
    let negate = matches!(p.get(j), Some('!') | Some('^'));
    if negate {
        j += 1;
    }
    let mut matched = false;
    let mut first = true;
    loop {
        if !first && p.get(j) == Some(&']') {
            return Some((matched != negate, j + 1));
        }
        first = false;
        let (lo, after) = class_char(p, j)?;
        j = after;
        let hi = if p.get(j) == Some(&'-') && p.get(j + 1).is_some_and(|&h| h != ']') {
            let (hi, after) = class_char(p, j + 1)?;
            j = after;
            hi
        } else {
            lo
        };
        if lo <= c && c <= hi {
            matched = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_basics() {
        assert!(glob_match("abc", "abc"));
        assert!(!glob_match("abc", "abd"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a*c", "abbbc"));
        assert!(!glob_match("a*c", "abbb"));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("[ab]x", "bx"));
        assert!(!glob_match("[ab]x", "cx"));
        assert!(glob_match("[!ab]x", "cx"));
        assert!(glob_match("[a-c]", "b"));
        assert!(glob_match("[]]", "]"));
        assert!(glob_match("a[b", "a[b"));
        assert!(glob_match("a\\*", "a*"));
        assert!(!glob_match("a\\*", "ab"));
        assert!(glob_match("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!glob_match("*a*b*c*d", "xxaxxbxxcxx"));
    }

    #[test]
    fn glob_does_not_blow_up() {
        let text = "a".repeat(2000);
        let pattern = format!("{}b", "*a".repeat(200));
        assert!(!glob_match(&pattern, &text));
    }
}
