//! Label and field selectors of the sandbox API server: parsing with the exact syntax and error
//! messages of k8s.io/apimachinery v0.33 (`labels.Parse`, `fields.ParseSelector`), matching, and
//! the per-kind field labels the kube-apiserver accepts (its field label conversion funcs and
//! `ToSelectableFields`).
//!
//! Pure functions over `serde_json` objects: no store, no HTTP.

use serde_json::{Map, Value};

/// Why a selector was refused; `Display` is the apiserver's message (served as 400 BadRequest).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{0}")]
    Label(String),
    #[error("{0}")]
    Field(String),
}

// ---------------------------------------------------------------------------------------------
// Label selectors.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Equals,
    DoubleEquals,
    NotEquals,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    /// Sorted and de-duplicated, as Go's `sets.String.List()` yields them.
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Map<String, Value>) -> bool {
        let value = labels.get(&self.key).map(label_text);
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.is_some_and(|v| has(&v))
            }
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !has(&v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(actual) = value.and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [wanted] = self.values.as_slice() else {
                    return false;
                };
                let Ok(wanted) = wanted.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > wanted
                } else {
                    actual < wanted
                }
            }
        }
    }
}

fn label_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A parsed label selector: the AND of its requirements, sorted by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses kubectl/apiserver selector syntax: `a=b`, `a==b`, `a!=b`, `a in (x,y)`,
    /// `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, comma-separated.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parser = Parser::new(s);
        let mut requirements = parser.parse().map_err(SelectorError::Label)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether an object with these labels (`metadata.labels`; missing means empty) matches.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        let empty = Map::new();
        let labels = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        self.matches(labels)
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn literal_token(s: &[u8]) -> Option<Token> {
    Some(match s {
        b")" => Token::ClosedPar,
        b"," => Token::Comma,
        b"!" => Token::DoesNotExist,
        b"==" => Token::DoubleEquals,
        b"=" => Token::Equals,
        b">" => Token::GreaterThan,
        b"in" => Token::In,
        b"<" => Token::LessThan,
        b"!=" => Token::NotEquals,
        b"notin" => Token::NotIn,
        b"(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// The label selector lexer; a NUL byte ends the input, as in Go.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Lexer<'_> {
    fn read(&mut self) -> u8 {
        match self.s.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) {
            self.scan_special_symbol()
        } else {
            self.scan_id_or_keyword()
        }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
        }
        let end = if self.pos > start && self.s.get(self.pos - 1) == Some(&0) {
            self.pos - 1
        } else {
            self.pos
        };
        let bytes = &self.s[start..end.max(start)];
        let text = String::from_utf8_lossy(bytes).into_owned();
        match literal_token(bytes) {
            Some(tok) => (tok, text),
            None => (Token::Identifier, text),
        }
    }

    fn scan_special_symbol(&mut self) -> (Token, String) {
        let mut buffer = Vec::new();
        let mut last: Option<(Token, String)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            buffer.push(ch);
            match literal_token(&buffer) {
                Some(tok) => last = Some((tok, String::from_utf8_lossy(&buffer).into_owned())),
                None if last.is_some() => {
                    self.unread();
                    break;
                }
                None => {}
            }
        }
        last.unwrap_or_else(|| {
            (
                Token::Error,
                format!(
                    "error expected: keyword found '{}'",
                    String::from_utf8_lossy(&buffer)
                ),
            )
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

impl Parser {
    fn new(s: &str) -> Parser {
        let mut lexer = Lexer {
            s: s.as_bytes(),
            pos: 0,
        };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Parser { items, position: 0 }
    }

    fn item(&self, idx: usize, ctx: Context) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(idx)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        // In a values context, `in` and `notin` are plain identifiers.
        let tok = match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => Token::Identifier,
            (_, tok) => tok,
        };
        (tok, lit)
    }

    fn lookahead(&self, ctx: Context) -> (Token, String) {
        self.item(self.position, ctx)
    }

    fn consume(&mut self, ctx: Context) -> (Token, String) {
        let item = self.item(self.position, ctx);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    let (t, l) = self.consume(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (t2, l2) = self.lookahead(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = operator {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        let mut values: Vec<String> = values;
        values.sort();
        values.dedup();
        new_requirement(key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut tok, mut literal) = self.consume(Context::Values);
        if tok == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (tok, literal) = self.consume(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let errs = super::schema::is_qualified_name(&literal);
        if !errs.is_empty() {
            return Err(field_invalid("<nil>", &literal, &errs.join("; ")));
        }
        let (t, _) = self.lookahead(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let s = self.parse_identifiers_list()?;
                let (tok, _) = self.consume(Context::Values);
                if tok != Token::ClosedPar {
                    // Go reports the literal seen before the list here.
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Context::Values);
            match tok {
                Token::Identifier => {
                    s.push(lit);
                    let (tok2, lit2) = self.lookahead(Context::Values);
                    match tok2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    let (tok2, _) = self.lookahead(Context::Values);
                    if tok2 == Token::ClosedPar {
                        s.push(String::new());
                        return Ok(s);
                    }
                    if tok2 == Token::Comma {
                        self.consume(Context::Values);
                        s.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Context::Values);
        if tok == Token::Identifier {
            return Ok(vec![lit]);
        }
        Err(format!("found '{lit}', expected: identifier"))
    }
}

/// `labels.NewRequirement` validation for what the parser can produce (the key is already valid).
fn new_requirement(key: String, op: Operator, values: Vec<String>) -> Result<Requirement, String> {
    let mut errs: Vec<String> = Vec::new();
    if matches!(op, Operator::GreaterThan | Operator::LessThan) {
        for (i, v) in values.iter().enumerate() {
            if v.parse::<i64>().is_err() {
                errs.push(field_invalid(
                    &format!("values[{i}]"),
                    v,
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                ));
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let msgs = super::schema::is_valid_label_value(v);
        if !msgs.is_empty() {
            errs.push(field_invalid(
                &format!("values[{i}][{key}]"),
                v,
                &msgs.join("; "),
            ));
        }
    }
    if !errs.is_empty() {
        return Err(aggregate(errs));
    }
    Ok(Requirement {
        key,
        operator: op,
        values,
    })
}

/// `field.Invalid(path, value, detail).Error()` for a string value.
fn field_invalid(path: &str, value: &str, detail: &str) -> String {
    format!(
        "{path}: Invalid value: {}: {detail}",
        super::schema::go_quote(value)
    )
}

/// `utilerrors.NewAggregate(...).Error()`: one message alone, several de-duplicated in brackets.
fn aggregate(errs: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

// ---------------------------------------------------------------------------------------------
// Field selectors.

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

/// A parsed field selector: the AND of `field=value` / `field!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// `fields.ParseSelector`: terms split on unescaped commas and sorted; no whitespace trimming;
    /// values may escape `\`, `,` and `=` with a backslash.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(rhs)?;
            terms.push(FieldTerm {
                field: lhs.to_string(),
                value,
                equal: op != "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    /// The field labels used, in the order the apiserver checks them.
    pub fn fields(&self) -> Vec<&str> {
        self.terms.iter().map(|t| t.field.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// `get` returns the object's value for a field label; `None` counts as "" as in Go's
    /// `fields.Set.Get`.
    pub fn matches(&self, get: &dyn Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let actual = get(&t.field).unwrap_or_default();
            (actual == t.value) == t.equal
        })
    }

    /// Matches an object of the given kind using [`field_value`].
    pub fn matches_object(&self, api_version: &str, kind: &str, obj: &Value) -> bool {
        self.matches(&|label| field_value(api_version, kind, obj, label))
    }
}

fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for op in ["!=", "==", "="] {
            if let Some(rhs) = rest.strip_prefix(op) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                other => {
                    return Err(SelectorError::Field(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with %v, i.e. as its code point.
            ',' | '=' => {
                return Err(SelectorError::Field(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            other => out.push(other),
        }
    }
    if in_slash {
        return Err(SelectorError::Field(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}

/// Where a resource comes from: custom resources convert field labels differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceOrigin {
    BuiltIn,
    Custom { namespaced: bool },
}

/// Refuses the first unsupported field label with the apiserver's message, as its field label
/// conversion does before listing or watching.
pub fn validate_field_selector(
    api_version: &str,
    kind: &str,
    origin: ResourceOrigin,
    selector: &FieldSelector,
) -> Result<(), SelectorError> {
    for label in selector.fields() {
        if let Some(msg) = unsupported_field_error(api_version, kind, origin, label) {
            return Err(SelectorError::Field(msg));
        }
    }
    Ok(())
}

/// The apiserver's message for a field label the resource does not support, or `None`.
pub fn unsupported_field_error(
    api_version: &str,
    kind: &str,
    origin: ResourceOrigin,
    label: &str,
) -> Option<String> {
    let supported = match origin {
        ResourceOrigin::Custom { namespaced } => {
            label == "metadata.name" || (namespaced && label == "metadata.namespace")
        }
        ResourceOrigin::BuiltIn => {
            if !has_conversion_func(api_version, kind) {
                if matches!(label, "metadata.name" | "metadata.namespace") {
                    return None;
                }
                return Some(format!(
                    "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                    super::schema::go_quote(label)
                ));
            }
            field_value(api_version, kind, &Value::Null, label).is_some()
        }
    };
    (!supported).then(|| format!("field label not supported: {label}"))
}

/// Kinds with their own field label conversion func in the kube-apiserver.
fn has_conversion_func(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        (
            "v1",
            "Pod" | "Node" | "Event" | "Namespace" | "Secret" | "Service"
        ) | ("events.k8s.io/v1", "Event")
    )
}

fn text_at(obj: &Value, pointer: &str) -> String {
    match obj.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn bool_at(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(false)
        .to_string()
}

/// The value of a field label for an object of the given kind, as the apiserver computes it for
/// field selectors; `None` when the kind does not support the label. Kinds without their own
/// conversion (ConfigMap, Lease, custom resources, ...) support `metadata.name` and
/// `metadata.namespace`.
pub fn field_value(api_version: &str, kind: &str, obj: &Value, label: &str) -> Option<String> {
    let meta = |label: &str, namespaced: bool| match label {
        "metadata.name" => Some(text_at(obj, "/metadata/name")),
        "metadata.namespace" if namespaced => Some(text_at(obj, "/metadata/namespace")),
        _ => None,
    };
    match (api_version, kind) {
        ("v1", "Pod") => match label {
            "spec.nodeName" | "spec.host" => Some(text_at(obj, "/spec/nodeName")),
            "spec.restartPolicy" => Some(text_at(obj, "/spec/restartPolicy")),
            "spec.schedulerName" => Some(text_at(obj, "/spec/schedulerName")),
            "spec.serviceAccountName" => Some(text_at(obj, "/spec/serviceAccountName")),
            "spec.hostNetwork" => Some(bool_at(obj, "/spec/hostNetwork")),
            "status.phase" => Some(text_at(obj, "/status/phase")),
            "status.podIP" => {
                // The internal object keeps only podIPs; podIP is its first entry.
                let first = text_at(obj, "/status/podIPs/0/ip");
                Some(if first.is_empty() {
                    text_at(obj, "/status/podIP")
                } else {
                    first
                })
            }
            "status.nominatedNodeName" => Some(text_at(obj, "/status/nominatedNodeName")),
            other => meta(other, true),
        },
        ("v1", "Node") => match label {
            "spec.unschedulable" => Some(bool_at(obj, "/spec/unschedulable")),
            other => meta(other, false),
        },
        ("v1", "Namespace") => match label {
            "status.phase" => Some(text_at(obj, "/status/phase")),
            other => meta(other, false),
        },
        ("v1", "Secret") => match label {
            "type" => Some(text_at(obj, "/type")),
            other => meta(other, true),
        },
        ("v1", "Service") => match label {
            "spec.clusterIP" => Some(text_at(obj, "/spec/clusterIP")),
            "spec.type" => Some(text_at(obj, "/spec/type")),
            other => meta(other, true),
        },
        ("v1", "Event") => match label {
            "involvedObject.kind"
            | "involvedObject.namespace"
            | "involvedObject.name"
            | "involvedObject.uid"
            | "involvedObject.apiVersion"
            | "involvedObject.resourceVersion"
            | "involvedObject.fieldPath" => {
                Some(text_at(obj, &format!("/{}", label.replacen('.', "/", 1))))
            }
            "reason" => Some(text_at(obj, "/reason")),
            "type" => Some(text_at(obj, "/type")),
            "reportingComponent" => Some(text_at(obj, "/reportingComponent")),
            "source" => {
                let component = text_at(obj, "/source/component");
                Some(if component.is_empty() {
                    text_at(obj, "/reportingComponent")
                } else {
                    component
                })
            }
            other => meta(other, true),
        },
        ("events.k8s.io/v1", "Event") => match label {
            "regarding.kind"
            | "regarding.namespace"
            | "regarding.name"
            | "regarding.uid"
            | "regarding.apiVersion"
            | "regarding.resourceVersion"
            | "regarding.fieldPath" => {
                Some(text_at(obj, &format!("/{}", label.replacen('.', "/", 1))))
            }
            "reason" => Some(text_at(obj, "/reason")),
            "type" => Some(text_at(obj, "/type")),
            "reportingController" => Some(text_at(obj, "/reportingController")),
            other => meta(other, true),
        },
        _ => meta(label, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn err(s: &str) -> String {
        LabelSelector::parse(s).unwrap_err().to_string()
    }

    #[test]
    fn label_selector_syntax_and_matching() {
        let l = labels(json!({"app": "web", "tier": "fe", "n": "5"}));
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "app in (web,db)",
            "app notin (db)",
            "app",
            "!missing",
            "  app = web ,  tier in ( fe , be )  ",
            "missing notin (x)",
            "missing!=x",
            "n>4",
            "n<6",
            "app in (in,web)",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).unwrap().matches(&l),
                "{s:?} should match"
            );
        }
        let no = [
            "app=db",
            "app!=web",
            "app notin (web)",
            "missing",
            "!app",
            "missing in (x)",
            "n>5",
            "app>1",
        ];
        for s in no {
            assert!(
                !LabelSelector::parse(s).unwrap().matches(&l),
                "{s:?} should not match"
            );
        }
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert!(LabelSelector::parse("!a").unwrap().matches(&Map::new()));
        let sel = LabelSelector::parse("b=1,a=2").unwrap();
        assert_eq!(sel.requirements()[0].key, "a");
        assert!(
            LabelSelector::parse("a in (x,,y)").unwrap().requirements()[0].values == ["", "x", "y"]
        );
        assert!(
            LabelSelector::parse("a=")
                .unwrap()
                .matches(&labels(json!({"a": ""})))
        );
        assert!(
            LabelSelector::parse("a=1")
                .unwrap()
                .matches_object(&json!({"metadata": {"labels": {"a": "1"}}}))
        );
        assert!(
            !LabelSelector::parse("a")
                .unwrap()
                .matches_object(&json!({"metadata": {}}))
        );
    }

    #[test]
    fn label_selector_errors_match_apiserver() {
        assert_eq!(
            err("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(err("a=b c"), "found 'c', expected: ',' or 'end of string'");
        assert_eq!(err("a=b,"), "found '', expected: identifier after ','");
        assert_eq!(
            err(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            err("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            err("a (b)"),
            "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            err("a=(b)"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            err("!=a"),
            "found '!=', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            err("!,a"),
            "unable to parse requirement: found ',', expected: identifier"
        );
        assert_eq!(
            err("-a=b"),
            "unable to parse requirement: <nil>: Invalid value: \"-a\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            err("Example.com/a=b"),
            "unable to parse requirement: <nil>: Invalid value: \"Example.com/a\": prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(
            err("a=b@c"),
            "unable to parse requirement: values[0][a]: Invalid value: \"b@c\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert_eq!(
            err("a>x"),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        assert!(
            err(&format!("a={}", "v".repeat(64))).contains("must be no more than 63 characters")
        );
    }

    #[test]
    fn field_selector_parsing() {
        let sel = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed").unwrap();
        assert_eq!(sel.fields(), ["spec.nodeName", "status.phase"]);
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"},
                         "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(sel.matches_object("v1", "Pod", &pod));
        assert!(
            !FieldSelector::parse("spec.nodeName==n2")
                .unwrap()
                .matches_object("v1", "Pod", &pod)
        );
        // A label with no value counts as "".
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches_object("v1", "Pod", &json!({}))
        );
        let esc = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert!(esc.matches(&|_| Some(r"a,b=c\d".to_string())));
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert_eq!(
            FieldSelector::parse("a").unwrap_err().to_string(),
            "invalid selector: 'a'; can't understand 'a'"
        );
        assert_eq!(
            FieldSelector::parse(r"a=b\x").unwrap_err().to_string(),
            r"invalid field selector: invalid escape sequence: \x"
        );
        assert_eq!(
            FieldSelector::parse("a=b=c").unwrap_err().to_string(),
            "invalid field selector: unescaped character in value: 61"
        );
        // No trimming, as in Go.
        assert_eq!(FieldSelector::parse("a = b").unwrap().fields(), ["a "]);
    }

    #[test]
    fn field_labels_per_kind() {
        let sel = FieldSelector::parse("spec.foo=x").unwrap();
        assert_eq!(
            validate_field_selector("v1", "Pod", ResourceOrigin::BuiltIn, &sel)
                .unwrap_err()
                .to_string(),
            "field label not supported: spec.foo"
        );
        assert_eq!(
            validate_field_selector("v1", "ConfigMap", ResourceOrigin::BuiltIn, &sel)
                .unwrap_err()
                .to_string(),
            "\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        let ns = FieldSelector::parse("metadata.namespace=x").unwrap();
        assert!(validate_field_selector("v1", "Node", ResourceOrigin::BuiltIn, &ns).is_err());
        assert!(validate_field_selector("v1", "Pod", ResourceOrigin::BuiltIn, &ns).is_ok());
        let custom_cluster = ResourceOrigin::Custom { namespaced: false };
        assert_eq!(
            validate_field_selector("x.io/v1", "Foo", custom_cluster, &ns)
                .unwrap_err()
                .to_string(),
            "field label not supported: metadata.namespace"
        );
        assert!(
            validate_field_selector(
                "x.io/v1",
                "Foo",
                ResourceOrigin::Custom { namespaced: true },
                &ns
            )
            .is_ok()
        );

        let node = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}});
        assert_eq!(
            field_value("v1", "Node", &node, "spec.unschedulable").as_deref(),
            Some("true")
        );
        assert_eq!(
            field_value("v1", "Node", &json!({}), "spec.unschedulable").as_deref(),
            Some("false")
        );
        assert_eq!(
            field_value("v1", "Secret", &json!({"type": "Opaque"}), "type").as_deref(),
            Some("Opaque")
        );
        assert_eq!(
            field_value(
                "v1",
                "Namespace",
                &json!({"status": {"phase": "Active"}}),
                "status.phase"
            )
            .as_deref(),
            Some("Active")
        );
        let pod =
            json!({"status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}]}, "spec": {}});
        assert_eq!(
            field_value("v1", "Pod", &pod, "status.podIP").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(
            field_value("v1", "Pod", &pod, "spec.hostNetwork").as_deref(),
            Some("false")
        );

        let ev = json!({"involvedObject": {"kind": "Pod", "name": "p", "uid": "u"}, "reason": "Started",
                        "type": "Normal", "reportingComponent": "kubelet", "source": {}});
        assert_eq!(
            field_value("v1", "Event", &ev, "involvedObject.kind").as_deref(),
            Some("Pod")
        );
        assert_eq!(
            field_value("v1", "Event", &ev, "involvedObject.uid").as_deref(),
            Some("u")
        );
        assert_eq!(
            field_value("v1", "Event", &ev, "source").as_deref(),
            Some("kubelet")
        );
        assert_eq!(
            field_value("v1", "Event", &ev, "involvedObject.fieldPath").as_deref(),
            Some("")
        );
        let ev2 = json!({"regarding": {"kind": "Pod", "name": "p"}, "reportingController": "c"});
        assert_eq!(
            field_value("events.k8s.io/v1", "Event", &ev2, "regarding.name").as_deref(),
            Some("p")
        );
        assert_eq!(
            field_value("events.k8s.io/v1", "Event", &ev2, "reportingController").as_deref(),
            Some("c")
        );
        assert_eq!(
            field_value("events.k8s.io/v1", "Event", &ev2, "involvedObject.name"),
            None
        );
        assert_eq!(field_value("v1", "Pod", &pod, "spec.containers"), None);
    }
}
