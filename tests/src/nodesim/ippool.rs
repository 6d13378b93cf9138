//! Pod IPs: unique per pod among the pods the simulator holds, from 10.200.0.0/13
//! (10.200.0.1 … 10.207.255.254, about 520,000 addresses).

use std::collections::HashSet;
use std::net::Ipv4Addr;

const BASE: u32 = u32::from_be_bytes([10, 200, 0, 0]);
const SIZE: u32 = 1 << 19;

/// Hands out and takes back pod IPs.
#[derive(Debug, Default)]
pub struct IpPool {
    used: HashSet<u32>,
    next: u32,
}

impl IpPool {
    pub fn new() -> Self {
        IpPool::default()
    }

    fn usable(offset: u32) -> bool {
        let last = offset & 0xff;
        last != 0 && last != 255
    }

    /// A free address, or `None` when the pool is exhausted.
    pub fn allocate(&mut self) -> Option<String> {
        for _ in 0..SIZE {
            let offset = self.next;
            self.next = (self.next + 1) % SIZE;
            if Self::usable(offset) && self.used.insert(offset) {
                return Some(Ipv4Addr::from(BASE + offset).to_string());
            }
        }
        None
    }

    /// Marks an address seen in an existing pod's status as taken. Returns false if it is
    /// outside the pool or already taken (the caller then allocates a fresh one).
    pub fn reserve(&mut self, ip: &str) -> bool {
        match ip.parse::<Ipv4Addr>() {
            Ok(addr) => {
                let v = u32::from(addr);
                (BASE..BASE + SIZE).contains(&v) && self.used.insert(v - BASE)
            }
            Err(_) => false,
        }
    }

    /// Gives an address back.
    pub fn release(&mut self, ip: &str) {
        if let Ok(addr) = ip.parse::<Ipv4Addr>() {
            let v = u32::from(addr);
            if v >= BASE {
                self.used.remove(&(v - BASE));
            }
        }
    }

    pub fn in_use(&self) -> usize {
        self.used.len()
    }
}

/// The InternalIP of simulated node `index` (10.199.0.0/16, wrapping after 65,000 nodes).
pub fn node_ip(index: usize) -> String {
    let i = (index % 65_000) as u32 + 1;
    Ipv4Addr::from(u32::from_be_bytes([10, 199, 0, 0]) + (i / 254) * 256 + i % 254 + 1).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_and_reusable() {
        let mut pool = IpPool::new();
        let mut seen = HashSet::new();
        for _ in 0..20_000 {
            let ip = pool.allocate();
            assert!(
                ip.as_ref().is_some_and(|ip| seen.insert(ip.clone())),
                "duplicate {ip:?}"
            );
        }
        assert!(seen.contains("10.200.0.1"));
        assert!(!seen.contains("10.200.0.0") && !seen.contains("10.200.0.255"));
        pool.release("10.200.0.1");
        assert_eq!(pool.in_use(), 19_999);
        assert!(pool.reserve("10.200.0.1"));
        assert!(!pool.reserve("10.200.0.1"), "already taken");
        assert!(!pool.reserve("192.168.0.1"), "outside the pool");
    }

    #[test]
    fn node_ips_distinct() {
        let ips: HashSet<String> = (0..5_000).map(node_ip).collect();
        assert_eq!(ips.len(), 5_000);
        assert!(
            ips.iter()
                .all(|ip| !ip.ends_with(".0") && !ip.ends_with(".255"))
        );
    }
}
