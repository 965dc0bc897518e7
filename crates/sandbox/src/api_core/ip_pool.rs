//! Service ClusterIP allocation from 10.96.0.0/12, with the apiserver's messages for a taken or
//! out-of-range address.
//!
//! Bookkeeping only: the `Api` holds the pool behind its lock.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// ClusterIP allocation from 10.96.0.0/12.
pub(super) struct IpPool {
    pub(super) used: BTreeSet<u32>,
    pub(super) next: u32,
}

const POOL_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
const POOL_SIZE: u32 = 1 << 20;

impl IpPool {
    pub(super) fn allocate(&mut self, wanted: Option<Ipv4Addr>) -> Result<Ipv4Addr, String> {
        if let Some(ip) = wanted {
            let n = u32::from(ip);
            if !(POOL_BASE + 1..POOL_BASE + POOL_SIZE - 1).contains(&n) {
                return Err(format!(
                    "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
                ));
            }
            if !self.used.insert(n) {
                return Err(format!(
                    "failed to allocate IP {ip}: provided IP is already allocated"
                ));
            }
            return Ok(ip);
        }
        for _ in 0..POOL_SIZE {
            let n = POOL_BASE + 1 + (self.next % (POOL_SIZE - 2));
            self.next = self.next.wrapping_add(1);
            if self.used.insert(n) {
                return Ok(Ipv4Addr::from(n));
            }
        }
        Err("range is full".into())
    }

    pub(super) fn release(&mut self, ip: &str) {
        if let Ok(ip) = ip.parse::<Ipv4Addr>() {
            self.used.remove(&u32::from(ip));
        }
    }
}
