//! Database URLs with their secrets taken out, for error messages and logs.
//!
//! A URL such as `postgres://app:s3cret@db.internal/toolgate` is what an
//! operator types, and what a connection error would otherwise repeat into
//! a log that many more people read. Every message that names a URL goes
//! through [`redact_url`].

/// What stands in for a removed secret.
pub const REDACTED: &str = "***";

/// Query parameters that carry a secret: the password itself (PostgreSQL
/// accepts `password=` in the query) and a client key's passphrase.
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// `url` with the password of its user part and the value of any
/// `password`/`sslpassword` query parameter replaced by `***`.
///
/// ```
/// use toolgate_store::redact_url;
/// assert_eq!(
///     redact_url("postgres://app:s3cret@db:5432/tg?sslmode=verify-full"),
///     "postgres://app:***@db:5432/tg?sslmode=verify-full"
/// );
/// ```
///
/// Errs on the side of hiding: an unencoded `@`, `/` or `?` inside a
/// password still ends up hidden, and the user name, host, port, database
/// and the other parameters (`sslmode`, `sslrootcert`) stay readable.
pub fn redact_url(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        // Not a URL with an authority (`sqlite:file.db`): nothing to hide
        // before a query, but a query may still hold a password.
        return redact_query(url);
    };
    let rest = &url[start..];
    // The user part ends at the last `@` before the query, so a password
    // holding an unencoded `@` or `/` is hidden whole. A password holding
    // an unencoded `?` has no `@` before that `?`: then take the last `@`
    // anywhere.
    let before_query = rest.find('?').unwrap_or(rest.len());
    let at = rest[..before_query].rfind('@').or_else(|| rest.rfind('@'));
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start]);
    let tail = match at {
        Some(at) => {
            let userinfo = &rest[..at];
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(REDACTED);
                }
                None => out.push_str(userinfo),
            }
            &rest[at..]
        }
        None => rest,
    };
    out.push_str(&redact_query(tail));
    out
}

/// `text` with the value of each secret query parameter replaced.
fn redact_query(text: &str) -> String {
    let Some((head, query)) = text.split_once('?') else {
        return text.to_owned();
    };
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if SECRET_PARAMS.iter().any(|s| name.eq_ignore_ascii_case(s)) => {
                format!("{name}={REDACTED}")
            }
            _ => param.to_owned(),
        })
        .collect();
    format!("{head}?{}", params.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn the_password_in_the_user_part_is_hidden() {
        assert_eq!(
            redact_url("postgres://app:s3cret@127.0.0.1:5432/test"),
            "postgres://app:***@127.0.0.1:5432/test"
        );
        assert_eq!(
            redact_url("mysql://root:pw@db/tg?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem"),
            "mysql://root:***@db/tg?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem"
        );
    }

    #[test]
    fn unencoded_separators_in_a_password_stay_hidden() {
        for (url, want) in [
            ("postgres://u:p@ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p?ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:a:b@h/db", "postgres://u:***@h/db"),
        ] {
            let got = redact_url(url);
            assert_eq!(got, want, "{url}");
            assert!(!got.contains("ss@") && !got.contains(":b@"), "{got}");
        }
    }

    #[test]
    fn password_parameters_are_hidden() {
        assert_eq!(
            redact_url("postgres://h/db?user=app&password=s3cret&sslmode=require"),
            "postgres://h/db?user=app&password=***&sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://h/db?sslpassword=k&PASSWORD=x"),
            "postgres://h/db?sslpassword=***&PASSWORD=***"
        );
    }

    #[test]
    fn urls_without_secrets_are_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/test",
            "mysql://root@127.0.0.1:3306/test",
            "sqlite:///var/lib/toolgate/toolgate.db",
            "sqlite://toolgate.db?mode=rwc",
            "not a url",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }
}
