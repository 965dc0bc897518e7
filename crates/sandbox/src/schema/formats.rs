//! The string formats the apiserver checks for CRDs (byte, date, date-time, uuid, ip, cidr, mac,
//! hostname, ...), as kube-openapi's format registry accepts them.
//!
//! Pure string predicates: must not build errors.

pub(super) fn format_known(f: &str) -> bool {
    matches!(
        f,
        "byte"
            | "date"
            | "datetime"
            | "uuid"
            | "uuid3"
            | "uuid4"
            | "uuid5"
            | "ipv4"
            | "ipv6"
            | "cidr"
            | "mac"
            | "hostname"
            | "hexcolor"
            | "bsonobjectid"
            | "password"
    )
}

pub(super) fn format_ok(f: &str, s: &str) -> bool {
    match f {
        "byte" => is_base64(s),
        "date" => is_date(s),
        "datetime" => is_datetime(s),
        "uuid" => is_uuid(s, None),
        "uuid3" => is_uuid(s, Some('3')),
        "uuid4" => is_uuid(s, Some('4')),
        "uuid5" => is_uuid(s, Some('5')),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::IpAddr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "hostname" => is_hostname(s),
        "hexcolor" => {
            let h = s.strip_prefix('#').unwrap_or(s);
            (h.len() == 3 || h.len() == 6) && h.chars().all(|c| c.is_ascii_hexdigit())
        }
        "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
        _ => true,
    }
}

fn is_base64(s: &str) -> bool {
    let b = s.as_bytes();
    if !b.len().is_multiple_of(4) {
        return false;
    }
    let pad = b.iter().rev().take_while(|&&c| c == b'=').count();
    pad <= 2
        && b[..b.len() - pad]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

fn digits(s: &str, n: usize) -> Option<u32> {
    (s.len() == n && s.bytes().all(|c| c.is_ascii_digit())).then(|| s.parse().ok())?
}

fn is_date(s: &str) -> bool {
    let p: Vec<&str> = s.split('-').collect();
    if p.len() != 3 {
        return false;
    }
    match (digits(p[0], 4), digits(p[1], 2), digits(p[2], 2)) {
        (Some(_), Some(m), Some(d)) => (1..=12).contains(&m) && (1..=31).contains(&d),
        _ => false,
    }
}

fn is_datetime(s: &str) -> bool {
    // Every valid date-time is ASCII, and the byte offsets below are only char boundaries in
    // ASCII text (`2024-01-01T00:00:0é` once sliced inside the `é` and panicked).
    if !s.is_ascii() {
        return false;
    }
    let Some(t) = s.find(['T', 't', ' ']) else {
        return false;
    };
    let (date, rest) = (&s[..t], &s[t + 1..]);
    if !is_date(date) || rest.len() < 8 {
        return false;
    }
    let (hms, mut zone) = rest.split_at(8);
    let hp: Vec<&str> = hms.split(':').collect();
    if hp.len() != 3
        || digits(hp[0], 2).is_none_or(|h| h > 23)
        || digits(hp[1], 2).is_none_or(|m| m > 59)
        || digits(hp[2], 2).is_none_or(|x| x > 60)
    {
        return false;
    }
    if let Some(frac) = zone.strip_prefix('.') {
        let n = frac.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        zone = &frac[n..];
    }
    match zone {
        "Z" | "z" => true,
        z if (z.starts_with('+') || z.starts_with('-')) && z.len() == 6 => {
            digits(&z[1..3], 2).is_some() && &z[3..4] == ":" && digits(&z[4..6], 2).is_some()
        }
        _ => false,
    }
}

fn is_uuid(s: &str, version: Option<char>) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let groups: Vec<&str> = s.split('-').collect();
    let shape_ok = groups.len() == 1
        || (groups.len() == 5 && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]));
    if !shape_ok || hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return false;
    }
    match version {
        None => true,
        Some(v) => {
            let variant_ok = v == '3'
                || matches!(
                    hex.as_bytes()[16].to_ascii_lowercase(),
                    b'8' | b'9' | b'a' | b'b'
                );
            hex.as_bytes()[12] as char == v && variant_ok
        }
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_mac(s: &str) -> bool {
    let hex_group = |g: &str, n: usize| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit());
    for sep in [':', '-'] {
        let g: Vec<&str> = s.split(sep).collect();
        if matches!(g.len(), 6 | 8 | 20) && g.iter().all(|x| hex_group(x, 2)) {
            return true;
        }
    }
    let g: Vec<&str> = s.split('.').collect();
    matches!(g.len(), 3 | 4 | 10) && g.iter().all(|x| hex_group(x, 4))
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}
