//! Go's formatting of numbers, as kube-apiserver and kubectl print them in messages and
//! tables. Owns only text formatting; knows nothing of the API.

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits that
/// round-trip, in exponent form when the exponent is below -4 or at least 6 (`1e+06`,
/// `1.234567e+06`, `1e-05`), with a two-digit exponent at least; `-0`, `NaN`, `±Inf` as Go
/// prints them.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let e = format!("{f:e}");
    let Some((mantissa, exp)) = e.split_once('e') else {
        return f.to_string();
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return f.to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

#[cfg(test)]
mod tests {
    use super::go_float;

    /// Values and what Go's `%v` prints for them (strconv's 'g' with the shortest precision).
    #[test]
    fn prints_as_go_does() {
        for (f, want) in [
            (1.5, "1.5"),
            (2.5, "2.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (100000.0, "100000"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (1e7, "1e+07"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (-2.25e-7, "-2.25e-07"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
        ] {
            assert_eq!(go_float(f), want, "{f:?}");
        }
    }
}
