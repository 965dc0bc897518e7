//! A scheduling policy's reason for an answer (contract 0.4.0): text from untrusted code, on
//! its way into a DIJob's status, its Events, logs and terminals.
//!
//! Owns: the bound and the sanitising every reason passes before anything keeps it. Must not
//! touch: where reasons are shown (the planner's) or how a policy words them.

/// The most of a reason that is kept, in UTF-8 bytes, `…` included when cut: room for the
/// examples' reasons ("collectors 4 → 6: +31 % throughput per added collector …", ~120 bytes)
/// twice over, while ten of them in `status.decisions` stay a small part of the object.
pub const MAX_REASON_BYTES: usize = 256;

/// Characters shown as a space: control characters (newlines, escapes, NUL, DEL) and the
/// Unicode format characters that reorder or hide text on a terminal (bidi embeddings,
/// overrides and isolates; zero-width joiners and marks; the byte-order mark), so a reason
/// cannot forge extra lines in `kubectl` output or show other text than it holds.
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
}

/// `text` made safe to show: hidden characters become spaces, runs of white space one space,
/// ends trimmed, then cut to [`MAX_REASON_BYTES`] on a character boundary. `None` when nothing
/// is left.
pub fn sanitize(text: &str) -> Option<String> {
    // Only the first bytes can survive the cut: a long reason is not scanned to its end.
    let head = &text[..text.floor_char_boundary(MAX_REASON_BYTES * 4)];
    let mut out = String::with_capacity(head.len().min(MAX_REASON_BYTES));
    for word in head
        .split(|c: char| c.is_whitespace() || hidden(c))
        .filter(|w| !w.is_empty())
    {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.len() > MAX_REASON_BYTES {
            break;
        }
    }
    let cut = text.len() > head.len();
    if out.is_empty() {
        return None;
    }
    if cut || out.len() > MAX_REASON_BYTES {
        const ELLIPSIS: &str = "…";
        let end = out.floor_char_boundary(MAX_REASON_BYTES - ELLIPSIS.len());
        out.truncate(end);
        out.push_str(ELLIPSIS);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_reasons_pass_unchanged() {
        let r = "collectors 4 → 6: +31 % throughput per added collector; a-3×2";
        assert_eq!(sanitize(r).as_deref(), Some(r));
    }

    #[test]
    fn control_and_format_characters_become_single_spaces() {
        let r = "line one\nline two\r\0\u{1b}[31mred\u{1b}[0m \u{202e}desrever\u{7f} end\u{200b}x";
        assert_eq!(
            sanitize(r).as_deref(),
            Some("line one line two [31mred [0m desrever end x")
        );
        assert_eq!(sanitize(" \n\t\u{202e} "), None);
        assert_eq!(sanitize(""), None);
    }

    #[test]
    fn long_reasons_are_cut_on_a_character_boundary() {
        let r = "é".repeat(1 << 20);
        let s = sanitize(&r).unwrap();
        assert!(s.len() <= MAX_REASON_BYTES, "{}", s.len());
        assert!(s.ends_with('…'));
        assert!(s.starts_with("éé"));
        // Exactly at the bound: kept whole.
        let exact = "a".repeat(MAX_REASON_BYTES);
        assert_eq!(sanitize(&exact).as_deref(), Some(exact.as_str()));
        let over = "a".repeat(MAX_REASON_BYTES + 1);
        let s = sanitize(&over).unwrap();
        assert_eq!(s.len(), MAX_REASON_BYTES);
        assert!(s.ends_with('…'));
        // Only the first 4 × MAX_REASON_BYTES are read: words after a run of padding that long
        // are never shown, and the scan never walks a huge reason.
        let padded = format!("{}{}", "\n".repeat(4 * MAX_REASON_BYTES), "tail");
        assert_eq!(sanitize(&padded), None);
        let late = format!("{}{}", "a ".repeat(3 * MAX_REASON_BYTES), "tail");
        assert!(!sanitize(&late).unwrap().contains("tail"));
    }
}
