//! The coin of adaptive ZabCT (seed 003 chapter 4): how a follower picks
//! its probability p of broadcasting an ack, from what it measures (the
//! leader's abcast rate λ, the one-way delay d, the ack rate bound θ).
//!
//! * [`expected_abcasts`] — W(p), the expected number of later abcasts the
//!   leader needs before it can deliver m (§4.3.2, eq. 4.8-4.9), by the
//!   recursion: the closed forms of Appendix C are only used as checks.
//! * R1 (eq. 4.1): W(p) < d·max(λ, 1/D), so p ≥ P1; R2 (eq. 4.2):
//!   p < (θ/n)·min(1/λ, D), so p ≤ P2 = (θ/n)·min(1/λ, D) − δ.
//! * [`estimate_p1`] — Algorithm 1 on the grid of step 0.01 (§4.3).
//! * [`Choice`] — which p in [P1, P2] (§5.2.1: upper, mid, low) or fixed.
//!
//! Decisions where the seed is inconsistent (README, "Zab variants"):
//! * δ: the text says 10⁻² (§4.3), the tables were computed with 0.001
//!   (P2 = 0.499, 0.249, 0.166, 0.124 for N = 3, 5, 7, 9 with θ = λ). We take
//!   0.001 for both P2 and Algorithm 1, which reproduces Tables F.1-F.2.
//! * Algorithm 1 as printed returns P2 + δ when P1l < P2 < P1 (its loop
//!   condition fails at once); its own Observation assumes the first test
//!   passes. We return 1 ("switch to Zab") whenever W(min(P2, P1u)) already
//!   misses R1: no p ≤ P2 satisfies R1 then.
//! * Appendix C's closed forms for N = 7 and 9 disagree with eq. 4.8-4.9
//!   (at p = 0.01 the recursion gives 60.858 and 62.635; printed 60.234 and
//!   44.08): the recursion is the definition, so we compute it.

/// Grid step of the search for P1u / P1l (R − 1 = 100 sub-intervals).
pub const GRID_STEP: f64 = 0.01;
/// δ of eq. 4.2 and Algorithm 1, as in the thesis' tables.
pub const DELTA: f64 = 0.001;

/// Quorum of follower acks the leader needs: a = ⌈(N−1)/2⌉ (§4.3.2).
pub fn acks_needed(replicas: usize) -> usize {
    replicas.saturating_sub(1).div_ceil(2)
}

fn choose(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// Binomial probability of `h` heads in `g` tosses: f(h; g).
fn binom(h: usize, g: usize, p: f64) -> f64 {
    choose(g, h) * p.powi(h as i32) * (1.0 - p).powi((g - h) as i32)
}

/// W(p) for `n` tossing followers and `a` acks needed (eq. 4.8-4.9):
/// W_i = (1 + Σ_{j=i+1}^{a-1} q_ij W_j) / (1 − q_ii), W = Σ_{i<a} f(i;n) W_i,
/// with q_ij = C(n−i, j−i) p^(j−i) (1−p)^(n−j). Infinite at p = 0, zero at
/// p = 1 (when a ≤ n).
pub fn expected_abcasts_with(p: f64, n: usize, a: usize) -> f64 {
    if a == 0 {
        return 0.0;
    }
    if p <= 0.0 || a > n {
        return f64::INFINITY;
    }
    let q = |i: usize, j: usize| binom(j - i, n - i, p);
    // W_i for i = a-1 down to 0 (absorbing states i ≥ a need none).
    let mut w = vec![0.0; a];
    for i in (0..a).rev() {
        let later: f64 = (i + 1..a).map(|j| q(i, j) * w[j]).sum();
        w[i] = (1.0 + later) / (1.0 - q(i, i));
    }
    (0..a).map(|i| binom(i, n, p) * w[i]).sum()
}

/// W(p) for a cluster of `replicas` with every follower up (n = N − 1).
pub fn expected_abcasts(p: f64, replicas: usize) -> f64 {
    expected_abcasts_with(p, replicas - 1, acks_needed(replicas))
}

/// Right-hand side of R1 (eq. 4.1): d · max(λ, 1/D). `d` and `timer_d` in
/// seconds, `lambda` in abcasts per second.
pub fn r1_bound(d: f64, lambda: f64, timer_d: f64) -> f64 {
    d * lambda.max(1.0 / timer_d)
}

/// P2 (eq. 4.2 less δ): (θ/n) · min(1/λ, D) − δ, at most 1.
pub fn p2(theta: f64, n: usize, lambda: f64, timer_d: f64, delta: f64) -> f64 {
    let inv = if lambda > 0.0 {
        1.0 / lambda
    } else {
        f64::INFINITY
    };
    (theta / n as f64 * inv.min(timer_d) - delta).min(1.0)
}

/// (P1l, P1u) on the grid: the largest grid point that misses R1 and the
/// smallest that meets it. `None` when even p = 1 misses it (bound ≤ 0).
pub fn bracket(bound: f64, w: impl Fn(f64) -> f64) -> Option<(f64, f64)> {
    let steps = (1.0 / GRID_STEP).round() as u32;
    let first = (0..=steps).find(|&r| w(r as f64 * GRID_STEP) < bound)?;
    // w(0) is infinite, so `first` ≥ 1.
    Some(((first - 1) as f64 * GRID_STEP, first as f64 * GRID_STEP))
}

/// P1^e by Algorithm 1: p in [P1, P1 + δ) when P1 ≤ P2, else 1 (no p
/// satisfies both R1 and R2: vote for Zab).
pub fn estimate_p1(p2: f64, bound: f64, delta: f64, w: impl Fn(f64) -> f64) -> f64 {
    let Some((p1l, p1u)) = bracket(bound, &w) else {
        return 1.0;
    };
    if p2 <= p1l {
        return 1.0;
    }
    let start = p2.min(p1u);
    if w(start) >= bound {
        return 1.0; // P1 > P2: see the module doc.
    }
    // Step down by δ while R1 still holds; counting steps keeps the grid
    // exact (no accumulated rounding).
    let mut k = 1u32;
    loop {
        let p = start - k as f64 * delta;
        if !(w(p) < bound && p > p1l) {
            return p + delta;
        }
        k += 1;
    }
}

/// p*(α : α+b) of eq. 4.7: the p that makes between α and α+b heads of n
/// most likely (1 ≤ α ≤ α+b < n).
pub fn p_star(alpha: usize, b: usize, n: usize) -> Option<f64> {
    if alpha == 0 || alpha + b >= n {
        return None;
    }
    let beta = n - alpha;
    let prod: f64 = (0..=b)
        .map(|j| (beta - j) as f64 / (alpha + j) as f64)
        .product();
    Some(1.0 / (1.0 + prod.powf(1.0 / (b + 1) as f64)))
}

/// Which p a ZabCT follower uses once P1 ≤ P2 (§5.2.1, Appendix D).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Choice {
    /// ZabCT_u: p = P2.
    Upper,
    /// ZabCT_a: p = (P1 + P2) / 2.
    Mid,
    /// ZabCT_aa: p = ((P1 + P2)/2 + P1) / 2.
    Low,
    /// Chapter 3's fixed coin (no adaptation, never votes for Zab).
    Fixed(f64),
    /// The largest p*(α:α+b) of eq. 4.7 inside [P1, P2] (fewest extra
    /// abcasts among the optimal ones), else P2.
    PStar,
}

impl Choice {
    pub fn parse(s: &str) -> Option<Choice> {
        Some(match s {
            "upper" => Choice::Upper,
            "mid" => Choice::Mid,
            "low" => Choice::Low,
            "p-star" => Choice::PStar,
            _ => {
                let p: f64 = s.strip_prefix("fixed:")?.parse().ok()?;
                if !(p > 0.0 && p <= 1.0) {
                    return None;
                }
                Choice::Fixed(p)
            }
        })
    }
}

/// What a follower measured over the last second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Abcasts per second seen from the leader.
    pub lambda: f64,
    /// Bound on the ack arrival rate (the thesis sets θ = λ, §5.2.1).
    pub theta: f64,
    /// One-way leader→follower delay, seconds.
    pub d: f64,
}

/// The outcome of one adaptation round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub p1: f64,
    pub p2: f64,
    /// The coin's probability, or `None`: no feasible p, vote for Zab.
    pub p: Option<f64>,
}

/// One round of §4.3 for a cluster of `replicas` with `n` followers up:
/// P2, P1 by Algorithm 1, then the chosen p (or a vote for Zab).
pub fn decide(m: Measured, replicas: usize, n: usize, timer_d: f64, choice: Choice) -> Decision {
    let a = acks_needed(replicas);
    let w = |p: f64| expected_abcasts_with(p, n, a);
    let p2 = p2(m.theta, n, m.lambda, timer_d, DELTA);
    let p1 = estimate_p1(p2, r1_bound(m.d, m.lambda, timer_d), DELTA, w);
    if let Choice::Fixed(p) = choice {
        return Decision { p1, p2, p: Some(p) };
    }
    if p1 > p2 {
        return Decision { p1, p2, p: None };
    }
    let mid = (p1 + p2) / 2.0;
    let p = match choice {
        Choice::Upper => p2,
        Choice::Mid => mid,
        Choice::Low => (mid + p1) / 2.0,
        Choice::PStar => (1..n)
            .flat_map(|alpha| (0..n - alpha).filter_map(move |b| p_star(alpha, b, n)))
            .filter(|&p| p >= p1 && p <= p2)
            .fold(None, |best: Option<f64>, p| {
                Some(best.map_or(p, |b| b.max(p)))
            })
            .unwrap_or(p2),
        Choice::Fixed(_) => unreachable!(),
    };
    Decision { p1, p2, p: Some(p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, eps: f64) -> bool {
        (a - b).abs() < eps
    }

    #[test]
    fn w_matches_appendix_f_and_the_closed_forms() {
        // Appendix F: N = 3 W(0.02) = 24.253, W(0.01) = 49.251; N = 5 28.374, 57.541.
        for (n, p, want) in [
            (3, 0.02, 24.253),
            (3, 0.01, 49.251),
            (5, 0.02, 28.374),
            (5, 0.01, 57.541),
        ] {
            let got = expected_abcasts(p, n);
            assert!(
                close(got, want, 0.001),
                "N={n} W({p}) = {got}, thesis {want}"
            );
        }
        // Appendix C's closed forms agree with the recursion for N = 3, 5, 7.
        for p in [0.01f64, 0.1, 0.3, 0.7] {
            let q00 = (1.0 - p).powi(2);
            assert!(close(expected_abcasts(p, 3), q00 / (1.0 - q00), 1e-9));
            let (q00, q01, q11) = (
                (1.0 - p).powi(4),
                4.0 * p * (1.0 - p).powi(3),
                (1.0 - p).powi(3),
            );
            let c5 = q00 / (1.0 - q00) + q01 / ((1.0 - q00) * (1.0 - q11));
            assert!(close(expected_abcasts(p, 5), c5, 1e-9));
        }
        // The recursion for N = 7, 9 at p = 0.01 (the printed 60.234 and 44.08 are not it).
        assert!(
            close(expected_abcasts(0.01, 7), 60.858, 0.001),
            "{}",
            expected_abcasts(0.01, 7)
        );
        assert!(
            close(expected_abcasts(0.01, 9), 62.635, 0.001),
            "{}",
            expected_abcasts(0.01, 9)
        );
        // Limits and monotonicity (Appendix C.2).
        assert_eq!(expected_abcasts(1.0, 5), 0.0);
        assert!(expected_abcasts(0.0, 5).is_infinite());
        let ws: Vec<f64> = (1..=100)
            .map(|r| expected_abcasts(r as f64 / 100.0, 7))
            .collect();
        assert!(ws.windows(2).all(|x| x[0] >= x[1]));
    }

    #[test]
    fn table_f1_row_is_recomputed() {
        // N = 3, WR 10 %: d 0.013, λ 2094, θ = λ → RHS 27.222, P1u 0.02, P1 0.018, P2 0.499, p 0.499.
        let m = Measured {
            lambda: 2094.0,
            theta: 2094.0,
            d: 0.013,
        };
        let rhs = r1_bound(m.d, m.lambda, 0.1);
        assert!(close(rhs, 27.222, 1e-9));
        let w = |p| expected_abcasts(p, 3);
        assert_eq!(
            bracket(rhs, w).map(|(l, u)| ((l * 100.0).round(), (u * 100.0).round())),
            Some((1.0, 2.0))
        );
        let dec = decide(m, 3, 2, 0.1, Choice::Upper);
        assert!(close(dec.p1, 0.018, 1e-9), "{dec:?}");
        assert!(close(dec.p2, 0.499, 1e-9));
        assert_eq!(dec.p, Some(dec.p2));
        assert!(close(w(dec.p1), 27.03, 0.01));
        // N = 5, WR 10 % (Table F.2): d 0.02, λ 1846 → RHS 36.92, P1 0.016, P2 0.249.
        let m5 = Measured {
            lambda: 1846.0,
            theta: 1846.0,
            d: 0.02,
        };
        let dec = decide(m5, 5, 4, 0.1, Choice::Mid);
        assert!(
            close(dec.p1, 0.016, 1e-9) && close(dec.p2, 0.249, 1e-9),
            "{dec:?}"
        );
        assert!(close(dec.p.unwrap(), (0.016 + 0.249) / 2.0, 1e-9));
        let low = decide(m5, 5, 4, 0.1, Choice::Low).p.unwrap();
        assert!(close(low, ((0.016 + 0.249) / 2.0 + 0.016) / 2.0, 1e-9));
    }

    #[test]
    fn algorithm_1_lands_within_delta_of_p1_or_gives_up() {
        let w = |p| expected_abcasts(p, 5);
        for bound in [3.0, 10.0, 27.2, 57.0, 90.0, 500.0] {
            let p1 = estimate_p1(1.0, bound, DELTA, w);
            // P1 is where W crosses the bound: W(p1) < bound ≤ W(p1 − δ).
            assert!(w(p1) < bound, "bound {bound}: W({p1}) = {}", w(p1));
            assert!(
                w(p1 - DELTA) >= bound - 1e-9,
                "bound {bound}: p1 {p1} not tight"
            );
        }
        // P2 below P1: no coin satisfies both, vote for Zab.
        assert_eq!(estimate_p1(0.005, 27.2, DELTA, w), 1.0);
        // Between P1l and P1 (the printed algorithm's gap): also 1.
        let (l, _) = bracket(40.0, w).unwrap();
        let p1 = estimate_p1(1.0, 40.0, DELTA, w);
        assert!(l < p1 - 2.0 * DELTA, "P1l {l}, P1 {p1}");
        assert_eq!(estimate_p1(p1 - 2.0 * DELTA, 40.0, DELTA, w), 1.0);
        // A non-positive bound cannot be met.
        assert_eq!(estimate_p1(1.0, 0.0, DELTA, w), 1.0);
        let m = Measured {
            lambda: 100.0,
            theta: 1.0,
            d: 0.001,
        };
        assert_eq!(decide(m, 5, 4, 0.1, Choice::Upper).p, None);
        assert_eq!(decide(m, 5, 4, 0.1, Choice::Fixed(0.5)).p, Some(0.5));
    }

    #[test]
    fn p2_matches_the_tables_and_p_star_eq_4_7() {
        for (n, want) in [(2, 0.499), (4, 0.249), (6, 0.166), (8, 0.124)] {
            let got = p2(1500.0, n, 1500.0, 0.1, DELTA);
            assert!(close(got, want, 0.0005), "n={n}: {got}");
        }
        // p*(α:α) = α/n: exactly α heads is likeliest at p = α/n.
        assert!(close(p_star(1, 0, 4).unwrap(), 0.25, 1e-12));
        assert!(close(p_star(2, 0, 4).unwrap(), 0.5, 1e-12));
        assert_eq!(p_star(0, 1, 4), None);
        assert_eq!(p_star(2, 2, 4), None);
        for s in ["upper", "mid", "low", "p-star", "fixed:0.5"] {
            assert!(Choice::parse(s).is_some(), "{s}");
        }
        assert_eq!(Choice::parse("fixed:0"), None);
        assert_eq!(Choice::parse("fixed:1.5"), None);
        assert_eq!(Choice::parse("Upper"), None);
    }

    /// The formulas at their edges: one follower left that must ACK (n = 1,
    /// a = 1) takes one abcast in expectation at p = 0.5 (W_0 = 2, times
    /// P(tail) = 0.5); more ACKs needed than followers toss is never; at a
    /// low λ timer D sets R1's bound (d / D), at the thesis' λ it is d·λ.
    #[test]
    fn w_and_r1_at_their_edges() {
        assert!((expected_abcasts_with(0.5, 1, 1) - 1.0).abs() < 1e-12);
        assert_eq!(expected_abcasts_with(0.5, 1, 2), f64::INFINITY);
        assert!((r1_bound(0.01, 10.0, 0.02) - 0.5).abs() < 1e-12);
        assert!((r1_bound(0.013, 2094.0, 0.02) - 27.222).abs() < 1e-9);
    }

    /// R1 is strict (eq. 4.1: W(p) < d·max(λ, 1/D)): a p whose W equals
    /// the bound does not meet it, neither in the bracket nor in
    /// Algorithm 1's walk down from P1u. Here W steps from 3 to exactly 2
    /// at p = 0.5 and to 1 at p = 0.6; the bound is 2.
    #[test]
    fn r1_is_strict() {
        let w = |p: f64| match p {
            p if p < 0.5 - 1e-9 => 3.0,
            p if p < 0.6 - 1e-9 => 2.0,
            _ => 1.0,
        };
        let (p1l, p1u) = bracket(2.0, w).expect("p = 1 meets R1");
        assert!(
            (p1l - 0.59).abs() < 1e-9 && (p1u - 0.6).abs() < 1e-9,
            "{p1l} {p1u}"
        );
        let p = estimate_p1(0.7, 2.0, 0.001, w);
        assert!((p - 0.6).abs() < 1e-9, "{p}");
    }

    /// Eq. 4.7 over a range of heads (b > 0): p*(1:2) of 4 tosses is
    /// 1 / (1 + (3/1 · 2/2)^(1/2)) = 1 / (1 + √3); a range reaching n is
    /// outside the equation (α + b < n).
    #[test]
    fn p_star_over_a_range_of_heads() {
        let want = 1.0 / (1.0 + 3f64.sqrt());
        assert!((p_star(1, 1, 4).expect("defined") - want).abs() < 1e-12);
        assert_eq!(p_star(3, 1, 4), None);
        assert_eq!(p_star(1, 3, 4), None);
    }

    /// `p-star` plays the largest p*(α:α+b) of eq. 4.7 inside [P1, P2]
    /// (every α ≥ 1, b ≥ 0 with α + b < n), else P2. With θ = 2λ (P2 ≈
    /// 2/n) several p* fall inside at N = 5 and 9.
    #[test]
    fn p_star_choice_is_the_largest_inside_the_bounds() {
        for replicas in [5usize, 9] {
            let n = replicas - 1;
            let m = Measured {
                lambda: 2000.0,
                theta: 4000.0,
                d: 0.013,
            };
            let dec = decide(m, replicas, n, 0.02, Choice::PStar);
            let inside: Vec<f64> = (1..n)
                .flat_map(|a| (0..n).filter_map(move |b| p_star(a, b, n)))
                .filter(|&p| p >= dec.p1 && p <= dec.p2)
                .collect();
            assert!(inside.len() >= 2, "N = {replicas}: {inside:?} in {dec:?}");
            let best = inside.iter().copied().fold(0.0, f64::max);
            assert_eq!(dec.p, Some(best), "N = {replicas}");
        }
    }
}
