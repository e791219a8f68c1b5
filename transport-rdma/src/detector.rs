//! The adaptive failure detector every backend shares (sans-IO).
//!
//! Each backend keeps one [`Detector`] per linked peer and feeds it what it observes:
//! [`Detector::heard`] with the time traffic from the peer last arrived (a probe or any
//! other frame), sampled once per probe tick, and [`Detector::check`] with the current
//! time. The detector learns the distribution of the gaps between arrivals and suspects
//! the peer once its silence exceeds
//!
//! ```text
//! timeout = clamp(mean_gap + suspect_deviations × deviation, suspect_floor, suspect_ceiling)
//! ```
//!
//! the mean-plus-deviation bound of TCP's retransmission time-out (Jacobson/Karels),
//! with two changes for the rare long gaps of a loaded machine, which a deviation
//! averaged over hundreds of regular ticks underrates: the deviation rises fast and
//! decays slowly, and the timeout is never below one and a half times the longest
//! recent gap (a peak that decays slowly too). So a peer whose scheduler just stalled it
//! for tens of milliseconds keeps a wider bound for a while instead of being suspected
//! by the next, similar stall (Derecho §3.7 leaves the policy to the failure detector;
//! this is ours).
//!
//! The probe thread itself may be stalled (the process was stopped, or starved of CPU):
//! then every peer looks silent at once and none of it is evidence against them. A
//! backend that sees its own tick come late calls [`Detector::forgive`], which restarts
//! the silence without taking a sample. (Forgiving only the tick's lateness detects a
//! hang sooner under load, but on one overloaded machine the peers starve together with
//! us: measured, it suspected live members.) Nothing here reads a clock: times are
//! microseconds on the caller's monotonic clock, so the simulator drives the same code in
//! virtual time.

use crate::FabricConfig;

/// Gain (as a right shift) of the mean gap: each sample moves it 1/8 of the way.
const MEAN_GAIN_SHIFT: u32 = 3;
/// Gain (as a right shift) of a rising deviation: it moves half-way to a larger error.
const DEVIATION_RISE_SHIFT: u32 = 1;
/// Gain (as a right shift) of a falling deviation: 1/64 of the way per sample, so at one
/// sample per 10 ms probe tick a spike is remembered for about a second.
const DEVIATION_DECAY_SHIFT: u32 = 6;

/// Gain (as a right shift) of a falling peak gap: 1/1024 of the way per sample, so at one
/// sample per 10 ms probe tick a stall is remembered for about ten seconds.
const PEAK_DECAY_SHIFT: u32 = 10;

/// The settings a [`Detector`] needs, in microseconds (from [`FabricConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetectorConfig {
    /// The timeout never drops below this.
    pub floor_us: u64,
    /// The timeout never exceeds this: a peer silent this long is always suspected.
    pub ceiling_us: u64,
    /// How many deviations above the mean gap the silence may reach.
    pub deviations: u64,
    /// The gap expected before any sample (the probe interval).
    pub initial_gap_us: u64,
}

impl DetectorConfig {
    /// The detector settings of a (validated) fabric configuration.
    pub fn from_fabric(cfg: &FabricConfig) -> Self {
        DetectorConfig {
            floor_us: cfg.suspect_floor_ms.saturating_mul(1000),
            ceiling_us: cfg.suspect_ceiling_ms.saturating_mul(1000),
            deviations: u64::from(cfg.suspect_deviations),
            initial_gap_us: cfg.probe_interval_ms.saturating_mul(1000),
        }
    }
}

/// What [`Detector::check`] concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The peer's silence is within its timeout.
    Alive,
    /// The peer has been silent longer than its timeout: declare it failed.
    Suspect {
        /// How long it had been silent.
        silent_us: u64,
        /// The timeout it exceeded.
        timeout_us: u64,
    },
}

/// The failure detector for one peer. See the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detector {
    cfg: DetectorConfig,
    /// When traffic from the peer last arrived (or silence was last forgiven).
    last_heard_us: u64,
    /// Smoothed gap between arrivals.
    mean_gap_us: u64,
    /// Smoothed absolute deviation of the gap from the mean.
    deviation_us: u64,
    /// The longest recent gap (jumps up, decays slowly).
    peak_gap_us: u64,
    /// Gaps sampled so far (saturating).
    samples: u64,
}

impl Detector {
    /// A detector for a peer linked at `now_us`: until samples arrive it expects a gap of
    /// one probe interval with a deviation of half that.
    pub fn new(cfg: DetectorConfig, now_us: u64) -> Self {
        Detector {
            cfg,
            last_heard_us: now_us,
            mean_gap_us: cfg.initial_gap_us,
            deviation_us: cfg.initial_gap_us / 2,
            peak_gap_us: cfg.initial_gap_us,
            samples: 0,
        }
    }

    /// Traffic from the peer arrived at `at_us` (the latest arrival the caller knows of).
    /// An arrival no later than the previous one is ignored; a later one samples the gap.
    pub fn heard(&mut self, at_us: u64) {
        if at_us <= self.last_heard_us {
            return;
        }
        let gap = at_us - self.last_heard_us;
        self.last_heard_us = at_us;
        self.sample(gap);
    }

    fn sample(&mut self, gap_us: u64) {
        let error = gap_us.abs_diff(self.mean_gap_us);
        if error > self.deviation_us {
            self.deviation_us += (error - self.deviation_us) >> DEVIATION_RISE_SHIFT;
        } else {
            self.deviation_us -= (self.deviation_us - error) >> DEVIATION_DECAY_SHIFT;
        }
        if gap_us > self.mean_gap_us {
            self.mean_gap_us += (gap_us - self.mean_gap_us) >> MEAN_GAIN_SHIFT;
        } else {
            self.mean_gap_us -= (self.mean_gap_us - gap_us) >> MEAN_GAIN_SHIFT;
        }
        if gap_us > self.peak_gap_us {
            self.peak_gap_us = gap_us;
        } else {
            self.peak_gap_us -= (self.peak_gap_us - gap_us) >> PEAK_DECAY_SHIFT;
        }
        self.samples = self.samples.saturating_add(1);
    }

    /// Silence up to `now_us` is not the peer's fault (our tick came late, our reader was
    /// busy, or bytes wait unread): restarts the silence without sampling a gap.
    pub fn forgive(&mut self, now_us: u64) {
        self.last_heard_us = self.last_heard_us.max(now_us);
    }

    /// The current timeout, within `[floor_us, ceiling_us]`.
    pub fn timeout_us(&self) -> u64 {
        let bound = self
            .mean_gap_us
            .saturating_add(self.deviation_us.saturating_mul(self.cfg.deviations))
            .max(self.peak_gap_us.saturating_add(self.peak_gap_us / 2));
        bound.clamp(
            self.cfg.floor_us,
            self.cfg.ceiling_us.max(self.cfg.floor_us),
        )
    }

    /// How long the peer has been silent at `now_us`.
    pub fn silence_us(&self, now_us: u64) -> u64 {
        now_us.saturating_sub(self.last_heard_us)
    }

    /// Whether the peer, silent since its last arrival, is to be suspected at `now_us`.
    pub fn check(&self, now_us: u64) -> Verdict {
        let silent_us = self.silence_us(now_us);
        let timeout_us = self.timeout_us();
        if silent_us > timeout_us {
            Verdict::Suspect {
                silent_us,
                timeout_us,
            }
        } else {
            Verdict::Alive
        }
    }

    /// Gaps sampled so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The smoothed gap between arrivals.
    pub fn mean_gap_us(&self) -> u64 {
        self.mean_gap_us
    }

    /// The longest recent gap between arrivals (decaying).
    pub fn peak_gap_us(&self) -> u64 {
        self.peak_gap_us
    }
}

/// How late a probe tick may come (beyond its interval) before the ticking side counts
/// as stalled itself (and forgives its peers' silence): half the floor.
pub fn stall_us(cfg: &DetectorConfig) -> u64 {
    cfg.floor_us / 2
}

/// This process's own stalls, seen from its probe ticks: a tick that comes later than its
/// interval means the process was stopped (SIGSTOP, a debugger), swapped out or starved.
/// A stall longer than the peers' suspicion floor may have got this node suspected and
/// excluded; [`StallLog::stall_us`] answers "was this node silent that long lately?" for a
/// node that then finds its peers gone ([`crate::Endpoint::stall_ms`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StallLog {
    /// When the last tick ran.
    last_tick_us: Option<u64>,
    /// The last stall past the bound: when it ended, and how late its tick came.
    last_stall: Option<(u64, u64)>,
}

impl StallLog {
    /// Records a tick at `now_us` of a loop that ticks every `interval_us`; returns how
    /// late it came (0 for the first). A lateness past `bound_us` is kept as a stall.
    pub fn tick(&mut self, now_us: u64, interval_us: u64, bound_us: u64) -> u64 {
        let late_us = self
            .last_tick_us
            .map_or(0, |t| now_us.saturating_sub(t).saturating_sub(interval_us));
        self.last_tick_us = Some(now_us);
        if late_us > bound_us {
            self.last_stall = Some((now_us, late_us));
        }
        late_us
    }

    /// The length of a stall past `bound_us` that ended at most `within_us` before
    /// `now_us`, or that is still going on (no tick for longer than `interval_us` +
    /// `bound_us`: the caller runs before the ticking thread did after a stop), if any.
    pub fn stall_us(
        &self,
        now_us: u64,
        within_us: u64,
        interval_us: u64,
        bound_us: u64,
    ) -> Option<u64> {
        let ongoing_us = self
            .last_tick_us
            .map_or(0, |t| now_us.saturating_sub(t).saturating_sub(interval_us));
        if ongoing_us > bound_us {
            return Some(ongoing_us);
        }
        self.last_stall
            .filter(|(end_us, _)| now_us.saturating_sub(*end_us) <= within_us)
            .map(|(_, late_us)| late_us)
    }
}

/// Microseconds on a process-wide monotonic clock (for backends without one of their own).
#[cfg(any(feature = "libfabric", feature = "verbs"))]
pub(crate) fn monotonic_us() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_micros()
        .min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cfg() -> DetectorConfig {
        DetectorConfig {
            floor_us: 50_000,
            ceiling_us: 2_000_000,
            deviations: 4,
            initial_gap_us: 10_000,
        }
    }

    #[test]
    fn silence_past_the_floor_is_suspected_for_a_regular_peer() {
        let mut d = Detector::new(cfg(), 0);
        let mut t = 0;
        for _ in 0..100 {
            t += 10_000;
            d.heard(t);
            assert_eq!(d.check(t), Verdict::Alive);
        }
        assert_eq!(d.timeout_us(), 50_000, "a steady peer sits on the floor");
        assert_eq!(d.check(t + 50_000), Verdict::Alive);
        assert!(matches!(d.check(t + 50_001), Verdict::Suspect { .. }));
    }

    #[test]
    fn a_jittery_peer_widens_the_timeout_and_it_decays_slowly() {
        let mut d = Detector::new(cfg(), 0);
        let mut t = 0;
        for i in 0..50 {
            t += if i % 10 == 9 { 80_000 } else { 10_000 };
            d.heard(t);
        }
        let wide = d.timeout_us();
        assert!(wide > 100_000, "spikes of 80 ms widen the bound: {wide}");
        for _ in 0..20 {
            t += 10_000;
            d.heard(t);
        }
        let later = d.timeout_us();
        assert!(later < wide, "quiet ticks narrow it again");
        assert!(later > 50_000, "but not at once: {later}");
    }

    #[test]
    fn one_long_gap_keeps_the_next_similar_one_from_suspecting() {
        let mut d = Detector::new(cfg(), 0);
        let mut t = 0;
        for _ in 0..500 {
            t += 10_000;
            d.heard(t);
        }
        // A stall just past the floor, once: afterwards the bound covers it.
        t += 60_000;
        d.heard(t);
        for _ in 0..50 {
            t += 10_000;
            d.heard(t);
        }
        assert!(d.peak_gap_us() > 55_000, "{d:?}");
        assert_eq!(d.check(t + 60_000), Verdict::Alive, "{d:?}");
    }

    #[test]
    fn a_late_tick_is_a_stall_remembered_for_the_window_asked() {
        let (interval, bound) = (10_000, 50_000);
        let mut log = StallLog::default();
        assert_eq!(log.tick(0, interval, bound), 0);
        assert_eq!(log.tick(10_000, interval, bound), 0);
        // Late, but within the bound: not a stall.
        assert_eq!(log.tick(60_000, interval, bound), 40_000);
        assert_eq!(log.stall_us(60_000, u64::MAX, interval, bound), None);
        // Stopped for 2 s: asked before the next tick, the stall is still going on.
        assert_eq!(log.stall_us(2_060_000, 0, interval, bound), Some(1_990_000));
        assert_eq!(log.tick(2_070_000, interval, bound), 2_000_000);
        // After the tick: remembered for the window asked, not beyond.
        assert_eq!(
            log.stall_us(2_075_000, 10_000, interval, bound),
            Some(2_000_000)
        );
        assert_eq!(log.stall_us(2_075_000, 1_000, interval, bound), None);
    }

    #[test]
    fn forgiving_restarts_the_silence_without_a_sample() {
        let mut d = Detector::new(cfg(), 0);
        d.heard(10_000);
        d.forgive(500_000);
        assert_eq!(d.samples(), 1);
        assert_eq!(d.check(500_000 + 40_000), Verdict::Alive);
        // An arrival recorded before the forgiveness is old news.
        d.heard(400_000);
        assert_eq!(d.samples(), 1);
    }

    #[test]
    fn impossible_settings_are_refused_naming_the_field() {
        let ok = FabricConfig::default();
        ok.validate().expect("the defaults validate");
        let cases: [(FabricConfig, &str); 7] = [
            (
                FabricConfig {
                    suspect_floor_ms: 3_000,
                    ..ok.clone()
                },
                "suspect_floor_ms (3000) must not exceed suspect_ceiling_ms",
            ),
            (
                FabricConfig {
                    probe_interval_ms: 50,
                    ..ok.clone()
                },
                "probe_interval_ms (50) must be below suspect_floor_ms (50)",
            ),
            (
                FabricConfig {
                    probe_interval_ms: 0,
                    ..ok.clone()
                },
                "probe_interval_ms (0) must lie between 1",
            ),
            (
                FabricConfig {
                    suspect_ceiling_ms: 700_000,
                    ..ok.clone()
                },
                "suspect_ceiling_ms (700000) must lie between 1",
            ),
            (
                FabricConfig {
                    suspect_deviations: 0,
                    ..ok.clone()
                },
                "suspect_deviations (0) must lie between 1",
            ),
            (
                FabricConfig {
                    outbound_bytes_max: 1,
                    ..ok.clone()
                },
                "outbound_bytes_max (1)",
            ),
            (
                FabricConfig {
                    read_spin_us: 100_001,
                    ..ok.clone()
                },
                "read_spin_us (100001) must not exceed 100000",
            ),
        ];
        for (cfg, want) in cases {
            let err = cfg.validate().expect_err(want).to_string();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }

    proptest! {
        #[test]
        fn the_timeout_stays_within_floor_and_ceiling(
            floor_ms in 1u64..500,
            extra_ms in 0u64..5_000,
            deviations in 1u64..16,
            gaps in proptest::collection::vec(0u64..10_000_000, 0..200),
        ) {
            let c = DetectorConfig {
                floor_us: floor_ms * 1000,
                ceiling_us: (floor_ms + extra_ms) * 1000,
                deviations,
                initial_gap_us: 1000,
            };
            let mut d = Detector::new(c, 0);
            let mut t = 0u64;
            for g in gaps {
                t += g;
                d.heard(t);
                let timeout = d.timeout_us();
                // Invariant: the bound is clamped, whatever the arrivals.
                prop_assert!(timeout >= c.floor_us && timeout <= c.ceiling_us);
                // Invariant: silence past the ceiling is always suspected.
                let is_suspect = matches!(d.check(t + c.ceiling_us + 1), Verdict::Suspect { .. });
                prop_assert!(is_suspect);
                // Invariant: a peer just heard is never suspected.
                prop_assert_eq!(d.check(t), Verdict::Alive);
            }
        }

        #[test]
        fn a_peer_heard_within_the_floor_is_never_suspected(
            gaps in proptest::collection::vec(1u64..50_000, 1..300),
        ) {
            let mut d = Detector::new(cfg(), 0);
            let mut t = 0u64;
            for g in gaps {
                // Checked just before the next arrival: the longest silence it shows.
                prop_assert_eq!(d.check(t + g), Verdict::Alive);
                t += g;
                d.heard(t);
            }
        }

        #[test]
        fn the_detector_is_deterministic(
            gaps in proptest::collection::vec(0u64..1_000_000, 0..100),
        ) {
            let mut a = Detector::new(cfg(), 0);
            let mut b = Detector::new(cfg(), 0);
            let mut t = 0;
            for g in gaps {
                t += g;
                a.heard(t);
                b.heard(t);
            }
            prop_assert_eq!(a, b);
        }
    }
}
