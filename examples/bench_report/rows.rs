//! The CSV rows the benches append: their kinds ([`Row`]), parsing a file into them with a
//! warning per skipped line, and lookups over them (servers, meta values, bench commands).
//!
//! Owns: the row format. Must not touch: what the report says about the rows (goals.rs,
//! markdown.rs, ratio.rs read them).

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Row {
    ControllerTime {
        server: String,
        n: u64,
        direct_exist_ms: f64,
        operator_exist_ms: f64,
        direct_running_ms: f64,
        operator_running_ms: f64,
        cpu_s_per_1000_jobs: f64,
    },
    /// The same burst written by the bench itself, the least a compatible controller writes;
    /// and the CPU floor's client's seconds per 1 000 jobs (benches/controller_scale/cpu_floor.rs;
    /// absent from rows written before it).
    ControllerFloor {
        server: String,
        n: u64,
        exist_ms: f64,
        running_ms: f64,
        cpu_s_per_1000_jobs: Option<f64>,
    },
    ControllerWrites {
        server: String,
        resource: String,
        verb: String,
        to_running: f64,
        to_succeeded: f64,
    },
    Memory {
        server: String,
        jobs: u64,
        rss_mib: f64,
        kib_per_extra_job: f64,
        /// The operator's high-water mark (VmHWM) over the run; older rows have none.
        peak_mib: Option<f64>,
    },
    Placement {
        server: String,
        n: u64,
        round: u64,
        ratio: f64,
    },
    ReplicaApi {
        connections: u64,
        req_per_s: f64,
        p50_ms: f64,
        p99_ms: f64,
    },
    PluginCall {
        name: String,
        microseconds: f64,
    },
    HotSwap {
        name: String,
        milliseconds: f64,
    },
    HeapOwner {
        owner: String,
        mib: f64,
    },
    /// The operator's CPU samples of one profile (`label`) owned by `owner`: their share in %
    /// and their count (`bench_report cpu`).
    CpuOwner {
        label: String,
        owner: String,
        percent: f64,
        samples: u64,
    },
    /// A measure of the active policy alone and with a shadow attached (issue 37): `bench` is
    /// `admit` (shadow_cost) or `placement` (placement, SHADOW=1).
    Shadow {
        bench: String,
        measure: String,
        alone: f64,
        shadowed: f64,
    },
    Meta {
        key: String,
        value: String,
    },
}

/// What one line of the CSV is.
#[derive(Debug, PartialEq)]
pub enum Line {
    Row(Row),
    /// Blank, or a `#` comment.
    Empty,
    /// A row kind this report does not know (its name).
    Unknown(String),
}

pub fn number(field: &str, what: &str) -> Result<f64, String> {
    match field.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{what}: not a number: {field:?}")),
    }
}

pub fn count(field: &str, what: &str) -> Result<u64, String> {
    field
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("{what}: not a whole number: {field:?}"))
}

pub fn text(field: &str, what: &str) -> Result<String, String> {
    let t = field.trim();
    if t.is_empty() {
        Err(format!("{what}: empty"))
    } else {
        Ok(t.to_string())
    }
}

/// The fields of `rest` split at commas outside double quotes; a quoted field loses its quotes
/// and `""` in it is a quote.
pub fn quoted_fields(rest: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    if quoted {
        return Err("unterminated quote".to_string());
    }
    fields.push(field);
    Ok(fields)
}

/// Splits `fields` (after the kind) into a free-form name (which may hold commas) and a number
/// in the last field.
pub fn name_and_number(fields: &[&str], what: &str) -> Result<(String, f64), String> {
    match fields.split_last() {
        Some((last, name)) if !name.is_empty() => {
            Ok((text(&name.join(","), "name")?, number(last, what)?))
        }
        _ => Err("expected <name>,<number>".to_string()),
    }
}

pub fn parse_line(line: &str) -> Result<Line, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Line::Empty);
    }
    let fields: Vec<&str> = line.split(',').collect();
    let (kind, rest) = match fields.split_first() {
        Some((kind, rest)) => (kind.trim(), rest),
        None => return Ok(Line::Empty),
    };
    let want = |n: usize, shape: &str| -> Result<(), String> {
        if rest.len() == n {
            Ok(())
        } else {
            Err(format!(
                "{kind}: expected {n} fields after the kind ({shape}), got {}",
                rest.len()
            ))
        }
    };
    let row = match kind {
        "controller-time" => {
            want(
                7,
                "server,n,direct_exist_ms,operator_exist_ms,direct_running_ms,operator_running_ms,cpu_s_per_1000_jobs",
            )?;
            Row::ControllerTime {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                direct_exist_ms: number(rest[2], "direct_exist_ms")?,
                operator_exist_ms: number(rest[3], "operator_exist_ms")?,
                direct_running_ms: number(rest[4], "direct_running_ms")?,
                operator_running_ms: number(rest[5], "operator_running_ms")?,
                cpu_s_per_1000_jobs: number(rest[6], "cpu_s_per_1000_jobs")?,
            }
        }
        "controller-floor" => {
            let shape = "server,n,floor_exist_ms,floor_running_ms[,floor_cpu_s_per_1000_jobs]";
            if rest.len() != 5 {
                want(4, shape)?;
            }
            Row::ControllerFloor {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                exist_ms: number(rest[2], "floor_exist_ms")?,
                running_ms: number(rest[3], "floor_running_ms")?,
                cpu_s_per_1000_jobs: match rest.get(4) {
                    Some(cpu) => Some(number(cpu, "floor_cpu_s_per_1000_jobs")?),
                    None => None,
                },
            }
        }
        "controller-writes" => {
            want(5, "server,resource,verb,to_running,to_succeeded")?;
            Row::ControllerWrites {
                server: text(rest[0], "server")?,
                resource: text(rest[1], "resource")?,
                verb: text(rest[2], "verb")?,
                to_running: number(rest[3], "to_running")?,
                to_succeeded: number(rest[4], "to_succeeded")?,
            }
        }
        "memory" => {
            if rest.len() != 5 {
                want(4, "server,jobs,rss_mib,kib_per_extra_job[,peak_mib]")?;
            }
            Row::Memory {
                server: text(rest[0], "server")?,
                jobs: count(rest[1], "jobs")?,
                rss_mib: number(rest[2], "rss_mib")?,
                kib_per_extra_job: number(rest[3], "kib_per_extra_job")?,
                peak_mib: rest.get(4).map(|v| number(v, "peak_mib")).transpose()?,
            }
        }
        "placement" => {
            want(4, "server,n,round,ratio")?;
            Row::Placement {
                server: text(rest[0], "server")?,
                n: count(rest[1], "n")?,
                round: count(rest[2], "round")?,
                ratio: number(rest[3], "ratio")?,
            }
        }
        "replica-api" => {
            want(4, "connections,req_per_s,p50_ms,p99_ms")?;
            Row::ReplicaApi {
                connections: count(rest[0], "connections")?,
                req_per_s: number(rest[1], "req_per_s")?,
                p50_ms: number(rest[2], "p50_ms")?,
                p99_ms: number(rest[3], "p99_ms")?,
            }
        }
        "plugin-calls" => {
            let (name, microseconds) = name_and_number(rest, "microseconds")?;
            Row::PluginCall { name, microseconds }
        }
        "hot-swap" => {
            let (name, milliseconds) = name_and_number(rest, "milliseconds")?;
            Row::HotSwap { name, milliseconds }
        }
        "heap-owner" => {
            let (owner, mib) = name_and_number(rest, "mib")?;
            Row::HeapOwner { owner, mib }
        }
        // Labels and owners hold commas: quoted (cpu.rs writes them so).
        "cpu-owner" => {
            let rest = line.split_once(',').map_or("", |(_, r)| r);
            let f = quoted_fields(rest)?;
            if f.len() != 4 {
                return Err(format!(
                    "cpu-owner: expected 4 fields after the kind (label,owner,percent,samples), got {}",
                    f.len()
                ));
            }
            Row::CpuOwner {
                label: text(&f[0], "label")?,
                owner: text(&f[1], "owner")?,
                percent: number(&f[2], "percent")?,
                samples: count(&f[3], "samples")?,
            }
        }
        "shadow" => {
            want(4, "bench,measure,alone,shadowed")?;
            Row::Shadow {
                bench: text(rest[0], "bench")?,
                measure: text(rest[1], "measure")?,
                alone: number(rest[2], "alone")?,
                shadowed: number(rest[3], "shadowed")?,
            }
        }
        "meta" => match rest.split_first() {
            Some((key, value)) if !value.is_empty() => Row::Meta {
                key: text(key, "key")?,
                value: value.join(",").trim().to_string(),
            },
            _ => return Err("meta: expected meta,<key>,<value>".to_string()),
        },
        other => return Ok(Line::Unknown(other.to_string())),
    };
    Ok(Line::Row(row))
}

/// The rows of `csv`, and a warning for each line skipped.
pub fn parse(csv: &str) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in csv.lines().enumerate() {
        match parse_line(line) {
            Ok(Line::Row(row)) => rows.push(row),
            Ok(Line::Empty) => {}
            Ok(Line::Unknown(kind)) => warnings.push(format!(
                "line {}: unknown row kind {kind:?}, ignored",
                i + 1
            )),
            Err(e) => warnings.push(format!("line {}: skipped, {e}: {line:?}", i + 1)),
        }
    }
    (rows, warnings)
}

/// The servers in the order they first appear.
pub fn servers(rows: &[Row]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for row in rows {
        let server = match row {
            Row::ControllerTime { server, .. }
            | Row::ControllerWrites { server, .. }
            | Row::Memory { server, .. }
            | Row::Placement { server, .. } => server,
            _ => continue,
        };
        if !out.contains(server) {
            out.push(server.clone());
        }
    }
    out
}

pub fn meta<'a>(rows: &'a [Row], want: &str) -> Option<&'a str> {
    rows.iter().rev().find_map(|row| match row {
        Row::Meta { key, value } if key == want => Some(value.as_str()),
        _ => None,
    })
}

/// The command of the first of `kinds` a `meta,command,<kind>,<command>` row names.
pub fn command(rows: &[Row], kinds: &[&str]) -> Option<String> {
    let commands: BTreeMap<&str, &str> = rows
        .iter()
        .filter_map(|row| match row {
            Row::Meta { key, value } if key == "command" => value.split_once(','),
            _ => None,
        })
        .map(|(kind, cmd)| (kind.trim(), cmd.trim()))
        .collect();
    kinds
        .iter()
        .find_map(|k| commands.get(k))
        .map(|c| c.to_string())
}

pub fn ratio(operator: f64, direct: f64) -> Option<f64> {
    let r = operator / direct;
    (direct > 0.0 && r.is_finite()).then_some(r)
}

/// The sample CSV the tests of every module read.
#[cfg(test)]
pub const SAMPLE: &str = include_str!("sample.csv");

/// The row one line parses to.
#[cfg(test)]
pub fn one(line: &str) -> Row {
    match parse_line(line) {
        Ok(Line::Row(row)) => row,
        other => panic!("{line:?}: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_row_kind() {
        assert_eq!(
            one("controller-time,real API server,1000,1.5,2,3,4.25,0.5"),
            Row::ControllerTime {
                server: "real API server".into(),
                n: 1000,
                direct_exist_ms: 1.5,
                operator_exist_ms: 2.0,
                direct_running_ms: 3.0,
                operator_running_ms: 4.25,
                cpu_s_per_1000_jobs: 0.5,
            }
        );
        assert_eq!(
            one("controller-floor,sandbox,1000,1200.5,2400"),
            Row::ControllerFloor {
                server: "sandbox".into(),
                n: 1000,
                exist_ms: 1200.5,
                running_ms: 2400.0,
                cpu_s_per_1000_jobs: None,
            }
        );
        assert_eq!(
            one("controller-floor,real API server,1000,1200.5,2400,2.90"),
            Row::ControllerFloor {
                server: "real API server".into(),
                n: 1000,
                exist_ms: 1200.5,
                running_ms: 2400.0,
                cpu_s_per_1000_jobs: Some(2.9),
            }
        );
        assert_eq!(
            one("controller-writes,sandbox,dijobs/status,patch,3.000,1.000"),
            Row::ControllerWrites {
                server: "sandbox".into(),
                resource: "dijobs/status".into(),
                verb: "patch".into(),
                to_running: 3.0,
                to_succeeded: 1.0,
            }
        );
        assert_eq!(
            one("memory,sandbox,5000,84.3,9.5"),
            Row::Memory {
                server: "sandbox".into(),
                jobs: 5000,
                rss_mib: 84.3,
                kib_per_extra_job: 9.5,
                peak_mib: None,
            }
        );
        assert_eq!(
            one("memory,sandbox,5000,84.3,9.5,120.5"),
            Row::Memory {
                server: "sandbox".into(),
                jobs: 5000,
                rss_mib: 84.3,
                kib_per_extra_job: 9.5,
                peak_mib: Some(120.5),
            }
        );
        assert_eq!(
            one("placement,sandbox,1000,2,1.0340"),
            Row::Placement {
                server: "sandbox".into(),
                n: 1000,
                round: 2,
                ratio: 1.034,
            }
        );
        assert_eq!(
            one("replica-api,16,29500,0.410,1.930"),
            Row::ReplicaApi {
                connections: 16,
                req_per_s: 29500.0,
                p50_ms: 0.41,
                p99_ms: 1.93,
            }
        );
        assert_eq!(
            one("plugin-calls,allocate/wasm, by value/100,48.2"),
            Row::PluginCall {
                name: "allocate/wasm, by value/100".into(),
                microseconds: 48.2,
            }
        );
        assert_eq!(
            one("hot-swap,first upload (compile) median,412.5"),
            Row::HotSwap {
                name: "first upload (compile) median".into(),
                milliseconds: 412.5,
            }
        );
        assert_eq!(
            one("cpu-owner,\"N = 1000, sandbox\",\"HTTP (hyper, \"\"tower\"\")\",12.5,40"),
            Row::CpuOwner {
                label: "N = 1000, sandbox".into(),
                owner: "HTTP (hyper, \"tower\")".into(),
                percent: 12.5,
                samples: 40,
            }
        );
        assert_eq!(
            one("cpu-owner,plain,allocator,0.5,2"),
            Row::CpuOwner {
                label: "plain".into(),
                owner: "allocator".into(),
                percent: 0.5,
                samples: 2,
            }
        );
        assert_eq!(
            one("meta,command,controller,SIZES=100,1000 cargo bench"),
            Row::Meta {
                key: "command".into(),
                value: "controller,SIZES=100,1000 cargo bench".into(),
            }
        );
    }

    #[test]
    fn the_sample_parses_without_warnings() {
        let (rows, warnings) = parse(SAMPLE);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            rows.len(),
            SAMPLE.lines().filter(|l| !l.trim().is_empty()).count()
        );
        assert_eq!(servers(&rows), ["sandbox", "real API server"]);
        assert_eq!(
            command(&rows, &["controller-time", "controller"]).as_deref(),
            Some("SIZES=100,1000 cargo bench --locked --bench controller_scale")
        );
        assert_eq!(
            meta(&rows, "machine"),
            Some("2 cores, 7 GiB, Intel(R) Xeon(R) CPU @ 2.20GHz")
        );
    }

    #[test]
    fn malformed_and_unknown_lines_are_skipped_with_a_warning() {
        let csv = format!(
            "{SAMPLE}\ncontroller-time,sandbox,100,abc,1,1,1,1\nmemory,sandbox,5000\n\
             replica-api,8,NaN,1,1\nplugin-calls,42\nmeta,lonely\nfrobnicate,1,2\n\n# comment\n\
             cpu-owner,N = 1000, sandbox,TLS,1.0,3\ncpu-owner,\"open,TLS,1.0,3\n"
        );
        let (rows, warnings) = parse(&csv);
        assert_eq!(rows.len(), parse(SAMPLE).0.len());
        assert_eq!(warnings.len(), 8, "{warnings:#?}");
        assert!(warnings[6].contains("expected 4 fields"), "{}", warnings[6]);
        assert!(
            warnings[7].contains("unterminated quote"),
            "{}",
            warnings[7]
        );
        assert!(warnings[0].contains("direct_exist_ms"), "{}", warnings[0]);
        assert!(warnings[1].contains("expected 4 fields"), "{}", warnings[1]);
        assert!(
            warnings[5].contains("unknown row kind \"frobnicate\""),
            "{}",
            warnings[5]
        );
    }
}
