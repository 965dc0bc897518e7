//! The standard `process_*` metrics (CPU seconds, resident and virtual memory, open and maximum
//! file descriptors, start time), read from `/proc/self` at each scrape, under the names every
//! Prometheus client library exports and stock dashboards query.
//!
//! Owns nothing but the collector; a platform without `/proc` exports only the start time.

use std::time::{SystemTime, UNIX_EPOCH};

use procfs::process::{LimitValue, Process};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Reads `/proc/self` when scraped; registered in a registry without prefix.
#[derive(Debug)]
pub struct ProcessCollector {
    start_time: f64,
    ticks_per_second: u64,
    page_size: u64,
}

impl ProcessCollector {
    pub fn new() -> ProcessCollector {
        ProcessCollector {
            start_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0),
            ticks_per_second: procfs::ticks_per_second().max(1),
            page_size: procfs::page_size(),
        }
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: f64,
) -> std::fmt::Result {
    ConstGauge::new(value).encode(encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        gauge(
            &mut encoder,
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Some(&Unit::Seconds),
            self.start_time,
        )?;
        // A scrape must answer even where /proc is missing or unreadable: the other metrics
        // are simply left out (and logged at debug, since every scrape would repeat it).
        let me = match Process::myself() {
            Ok(me) => me,
            Err(error) => {
                tracing::debug!(%error, "no /proc/self: process metrics left out");
                return Ok(());
            }
        };
        if let Ok(stat) = me.stat() {
            // u64 ticks to f64: exact below 2^53 ticks, i.e. for millions of years.
            let cpu = (stat.utime + stat.stime) as f64 / self.ticks_per_second as f64;
            ConstCounter::new(cpu).encode(encoder.encode_descriptor(
                "process_cpu",
                "Total user and system CPU time spent",
                Some(&Unit::Seconds),
                MetricType::Counter,
            )?)?;
            gauge(
                &mut encoder,
                "process_resident_memory",
                "Resident memory size",
                Some(&Unit::Bytes),
                stat.rss.saturating_mul(self.page_size) as f64,
            )?;
            gauge(
                &mut encoder,
                "process_virtual_memory",
                "Virtual memory size",
                Some(&Unit::Bytes),
                stat.vsize as f64,
            )?;
        }
        if let Ok(open) = me.fd_count() {
            gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors",
                None,
                open as f64,
            )?;
        }
        if let Ok(limits) = me.limits() {
            let max = match limits.max_open_files.soft_limit {
                LimitValue::Value(v) => v as f64,
                LimitValue::Unlimited => f64::INFINITY,
            };
            gauge(
                &mut encoder,
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                max,
            )?;
        }
        Ok(())
    }
}
