//! `k8s.io/apimachinery/pkg/util/duration.HumanDuration`, the ages and durations every printer
//! shows, over a signed span (clock skew).
//!
//! Pure arithmetic: must not know about objects.

/// Exactly `k8s.io/apimachinery/pkg/util/duration.HumanDuration`.
pub fn human_duration(d: std::time::Duration) -> String {
    human_duration_nanos(i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// HumanDuration over a signed span: timestamps slightly in the future (clock skew) read
/// "0s", further ones "<invalid>".
pub(super) fn human_duration_nanos(nanos: i128) -> String {
    const SEC: i128 = 1_000_000_000;
    // Go's int(d.Seconds()) truncates towards zero.
    let seconds = nanos / SEC;
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = nanos / (60 * SEC);
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = nanos / (3600 * SEC);
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{}h", hours / 24, h)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{}d", hours / 24 / 365, dy)
        };
    }
    format!("{}y", hours / 24 / 365)
}
