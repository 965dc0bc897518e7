//! Name and label-syntax checks of apimachinery `pkg/util/validation` (DNS-1123 subdomains and
//! labels, DNS-1035 labels, qualified names, label values) with their exact messages, and the
//! `metadata.name` rule of a kind (`NameRule`, `ValidateNameFunc`).
//!
//! Pure string checks: must not know about objects, schemas or field paths.

/// How `metadata.name` is checked (`ValidateNameFunc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    Dns1123Subdomain,
    Dns1123Label,
    Dns1035Label,
    PathSegment,
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `validation.RegexError`; note Go's double space before each " or ".
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn is_label_chars(s: &str, first: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && first(b[0])
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn dns1123_label_ok(s: &str) -> bool {
    is_label_chars(s, |c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

fn dns1123_subdomain_ok(s: &str) -> bool {
    s.split('.').all(dns1123_label_ok)
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !dns1123_subdomain_ok(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !dns1123_label_ok(s) {
        if dns1123_subdomain_ok(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1035Label`.
pub fn is_dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label_chars(s, |c| c.is_ascii_lowercase()) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

fn qualified_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` (label keys, annotation keys, finalizers).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [n] => *n,
        [prefix, n] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *n
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !qualified_part_ok(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !qualified_part_ok(value) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn mask_trailing_dash(name: &str) -> String {
    // As apimachinery does: drops two bytes and appends "a" (it only needs a valid ending).
    if name.len() > 1 && name.ends_with('-') {
        let cut = name.len() - 2;
        match name.get(..cut) {
            Some(head) => format!("{head}a"),
            None => "a".into(),
        }
    } else {
        name.to_string()
    }
}

pub(super) fn name_errors(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    if rule == NameRule::PathSegment {
        if !prefix {
            for bad in [".", ".."] {
                if name == bad {
                    return vec![format!("may not be '{bad}'")];
                }
            }
        }
        return ["/", "%"]
            .iter()
            .filter(|c| name.contains(*c))
            .map(|c| format!("may not contain '{c}'"))
            .collect();
    }
    let n = if prefix {
        mask_trailing_dash(name)
    } else {
        name.to_string()
    };
    match rule {
        NameRule::Dns1123Subdomain => is_dns1123_subdomain(&n),
        NameRule::Dns1123Label => is_dns1123_label(&n),
        _ => is_dns1035_label(&n),
    }
}
