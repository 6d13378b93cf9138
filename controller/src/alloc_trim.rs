//! Hands the allocator's freed heap back to the kernel.
//!
//! glibc returns freed memory to the kernel only from the top of the heap (and above
//! `M_TRIM_THRESHOLD`); free chunks below a live allocation stay resident. After the
//! initial list of 10,000 pods, and after each burst of reconciles, tens of MiB of the
//! heap are free but resident: `malloc_trim(0)` gives back every free page of every
//! arena (`MADV_DONTNEED`), which `free` alone never does. It walks the free lists
//! only, a fraction of a millisecond on this heap, so a periodic call is cheap.
//!
//! Linux with glibc only; elsewhere [`trim`] does nothing.
#![allow(unsafe_code)]

use std::time::Duration;

/// Returns the freed heap of every glibc arena to the kernel. True when memory was
/// released.
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a plain integer, touches only the allocator's own
        // state under the allocator's locks, and is safe to call from any thread at any
        // time (glibc documents it MT-Safe); it never frees memory in use.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Trims every `period` on a blocking thread, forever (spawn it, drop the handle to
/// stop with the runtime).
pub async fn run_periodic(period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // the first tick is immediate: nothing to trim yet
    tick.tick().await;
    loop {
        tick.tick().await;
        let started = std::time::Instant::now();
        let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
        tracing::debug!(
            released,
            took_us = started.elapsed().as_micros() as u64,
            "malloc_trim"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_after_freeing_a_large_heap_is_safe_and_leaves_memory_usable() {
        // many small blocks (below the mmap threshold) so they live in the heap
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![(i % 251) as u8; 512]).collect();
        let keep: Vec<Vec<u8>> = blocks.iter().step_by(1000).cloned().collect();
        drop(blocks);
        let _ = trim();
        // the survivors are intact and the allocator still works
        for (n, b) in keep.iter().enumerate() {
            assert!(b.iter().all(|&x| x == ((n * 1000) % 251) as u8));
        }
        let again: Vec<Vec<u8>> = (0..1000).map(|_| vec![7u8; 512]).collect();
        assert_eq!(again.iter().map(Vec::len).sum::<usize>(), 512_000);
    }
}
