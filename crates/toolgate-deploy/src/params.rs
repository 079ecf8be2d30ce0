//! Named parameters (`:order_id`) rewritten to a backend's placeholders.
//!
//! A deployment file writes one query for any backend; the drivers want
//! `$1…` (PostgreSQL) or `?` (MySQL, SQLite). The rewrite skips string
//! literals, quoted identifiers and comments, so `':not_a_param'` stays
//! text, and PostgreSQL's `::type` casts are not parameters. Values are
//! always bound, never spliced into the text.

/// Which SQL dialect a query is written in: its placeholders and quoting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `$1`, `$2`, … (a name used twice is one parameter); `$tag$` strings.
    Postgres,
    /// `?` per occurrence; backslash escapes in strings; backtick names.
    MySql,
    /// `?` per occurrence; backtick names.
    Sqlite,
}

/// A query in a backend's placeholders, with the names to bind in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The SQL text the driver prepares.
    pub sql: String,
    /// The parameter names, one per bind, in bind order.
    pub binds: Vec<String>,
}

/// Rewrites `sql`'s named parameters. Errors: an unterminated literal or
/// comment (the text would not mean what it seems to).
pub fn rewrite(sql: &str, dialect: Dialect) -> Result<Rewritten, String> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut binds: Vec<String> = Vec::new();
    let mut i = 0;
    // Copies from `from` up to and including the closing `quote`; a doubled
    // quote is an escaped one (SQL standard; also MySQL's backslash escape
    // inside single quotes is honoured, as MySQL's default mode reads it).
    let skip_quoted = |i: usize, quote: u8| -> Result<usize, String> {
        let mut j = i + 1;
        while j < b.len() {
            if quote == b'\'' && dialect == Dialect::MySql && b[j] == b'\\' {
                j += 2;
                continue;
            }
            if b[j] == quote {
                if j + 1 < b.len() && b[j + 1] == quote {
                    j += 2;
                    continue;
                }
                return Ok(j + 1);
            }
            j += 1;
        }
        Err(format!("unterminated {} quote", quote as char))
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\'' | b'"' => {
                let end = skip_quoted(i, c)?;
                out.push_str(&sql[i..end]);
                i = end;
            }
            b'`' if dialect != Dialect::Postgres => {
                let end = skip_quoted(i, c)?;
                out.push_str(&sql[i..end]);
                i = end;
            }
            b'$' if dialect == Dialect::Postgres => {
                // A dollar-quoted string: `$$…$$` or `$tag$…$tag$`.
                let tag_end = sql[i + 1..]
                    .find(|c: char| c != '_' && !c.is_ascii_alphanumeric())
                    .map(|n| i + 1 + n);
                match tag_end {
                    Some(t) if b[t] == b'$' && !b[i + 1].is_ascii_digit() => {
                        let tag = &sql[i..=t];
                        let end = sql[t + 1..]
                            .find(tag)
                            .map(|n| t + 1 + n + tag.len())
                            .ok_or_else(|| format!("unterminated {tag} string"))?;
                        out.push_str(&sql[i..end]);
                        i = end;
                    }
                    _ if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                        return Err(
                            "positional placeholders ($1) are not allowed: name them (:order_id)"
                                .to_owned(),
                        );
                    }
                    _ => {
                        out.push('$');
                        i += 1;
                    }
                }
            }
            b'?' if dialect != Dialect::Postgres => {
                return Err(
                    "positional placeholders (?) are not allowed: name them (:order_id)".to_owned(),
                );
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                let end = sql[i..].find('\n').map_or(b.len(), |n| i + n);
                out.push_str(&sql[i..end]);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = sql[i + 2..]
                    .find("*/")
                    .map(|n| i + 2 + n + 2)
                    .ok_or("unterminated /* comment")?;
                out.push_str(&sql[i..end]);
                i = end;
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push_str("::");
                i += 2;
            }
            b':' if b
                .get(i + 1)
                .is_some_and(|&n| n == b'_' || n.is_ascii_alphabetic()) =>
            {
                let start = i + 1;
                let mut end = start;
                while end < b.len() && (b[end] == b'_' || b[end].is_ascii_alphanumeric()) {
                    end += 1;
                }
                let name = &sql[start..end];
                match dialect {
                    Dialect::MySql | Dialect::Sqlite => {
                        binds.push(name.to_owned());
                        out.push('?');
                    }
                    Dialect::Postgres => {
                        let n = match binds.iter().position(|b| b == name) {
                            Some(p) => p + 1,
                            None => {
                                binds.push(name.to_owned());
                                binds.len()
                            }
                        };
                        out.push('$');
                        out.push_str(&n.to_string());
                    }
                }
                i = end;
            }
            _ => {
                // Whole UTF-8 characters: `i` only ever stops on ASCII bytes
                // handled above or on a character's first byte.
                let ch = sql[i..].chars().next().unwrap_or('\u{fffd}');
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    Ok(Rewritten { sql: out, binds })
}

/// The distinct names a query uses, in first-use order.
pub fn names(sql: &str, dialect: Dialect) -> Result<Vec<String>, String> {
    Ok(rewrite(sql, dialect)?.binds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_reuses_a_name_question_binds_each_use() {
        let q = "SELECT v FROM t WHERE a = :a AND b = :b OR a2 = :a";
        let n = rewrite(q, Dialect::Postgres).unwrap();
        assert_eq!(n.sql, "SELECT v FROM t WHERE a = $1 AND b = $2 OR a2 = $1");
        assert_eq!(n.binds, ["a", "b"]);
        let m = rewrite(q, Dialect::MySql).unwrap();
        assert_eq!(m.sql, "SELECT v FROM t WHERE a = ? AND b = ? OR a2 = ?");
        assert_eq!(m.binds, ["a", "b", "a"]);
    }

    #[test]
    fn literals_comments_identifiers_and_casts_are_not_parameters() {
        let q = "SELECT ':x', \"c:y\", `d:z`, 'it''s :w', id::text -- :c\n/* :d */ FROM t WHERE id = :id";
        let r = rewrite(q, Dialect::Sqlite).unwrap();
        assert_eq!(
            r.sql,
            "SELECT ':x', \"c:y\", `d:z`, 'it''s :w', id::text -- :c\n/* :d */ FROM t WHERE id = ?"
        );
        assert_eq!(r.binds, ["id"]);
        // MySQL reads a backslash escape inside a string; PostgreSQL does not.
        let r = rewrite("SELECT 'a\\':b' WHERE x = :é", Dialect::MySql).unwrap();
        assert_eq!(r.sql, "SELECT 'a\\':b' WHERE x = :é");
        assert!(r.binds.is_empty());
        let r = rewrite("SELECT 'a\\', :b, $$ :c $$, $t$ :d $t$", Dialect::Postgres).unwrap();
        assert_eq!(r.sql, "SELECT 'a\\', $1, $$ :c $$, $t$ :d $t$");
        assert_eq!(r.binds, ["b"]);
    }

    #[test]
    fn unterminated_text_is_refused() {
        assert!(rewrite("SELECT 'a", Dialect::Sqlite).is_err());
        assert!(rewrite("SELECT /* a", Dialect::Sqlite).is_err());
        assert!(rewrite("SELECT $x$ a", Dialect::Postgres).is_err());
        // A positional placeholder would collide with the rewritten ones.
        assert!(rewrite("SELECT $1", Dialect::Postgres).is_err());
        assert!(rewrite("SELECT ?", Dialect::MySql).is_err());
        assert!(rewrite("SELECT '?'", Dialect::MySql).is_ok());
    }
}
