//! A small seeded generator (SplitMix64): the same seed gives the same
//! fault schedule and the same client timings, so `--seed` replays a run.

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform between `lo` and `hi` (inclusive, millisecond steps).
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (
            lo.as_millis() as u64,
            hi.as_millis().max(lo.as_millis()) as u64,
        );
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }

    /// One item of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_bounds_hold() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            let d = r.duration(Duration::from_millis(5), Duration::from_millis(9));
            assert!((5..=9).contains(&d.as_millis()));
            assert!(r.below(3) < 3);
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }
}
