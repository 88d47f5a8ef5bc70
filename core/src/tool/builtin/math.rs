//! The `math.calculate` body (SPEC §12.5): exact integer arithmetic on checked `i64`.
//!
//! The expression is lexed, parsed into a tree and only then evaluated, so a malformed
//! expression is always a syntax error even if evaluating a prefix of it would overflow.
//! Choices the spec leaves open: literals may carry leading zeros but count every digit toward
//! the 18; a longer literal is a syntax error; whitespace is ASCII space, tab, CR and LF; depth
//! counts nested parentheses (unary minus chains are bounded by the token limit alone); and
//! `i64::MIN % -1` is `0`, its exact value, rather than an overflow.

use serde_json::{Value, json};

use crate::action::JsonMap;
use crate::ports::{BoxFut, Tool, ToolContext, ToolFailure, ToolSuccess};
use crate::vocab::ToolFailureKind;

use super::super::spec::ToolSpec;
use super::specs::math_calculate_spec;

/// The most tokens an expression may have.
pub const MAX_TOKENS: usize = 128;
/// The deepest parenthesis nesting allowed.
pub const MAX_DEPTH: usize = 32;
/// The most digits in one integer literal; 18 digits always fit an `i64`.
pub const MAX_LITERAL_DIGITS: usize = 18;

/// Why an expression could not be evaluated; each maps to one reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalculateError {
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("division by zero")]
    DivisionByZero,
    #[error("the result does not fit a signed 64-bit integer")]
    ResultOutOfRange,
    #[error("the expression has more than {MAX_TOKENS} tokens")]
    ExpressionTooLong,
    #[error("the expression nests parentheses deeper than {MAX_DEPTH}")]
    ExpressionTooDeep,
}

impl CalculateError {
    pub fn reason_code(&self) -> &'static str {
        match self {
            CalculateError::Syntax(_) => "tool.invalid_arguments.syntax",
            CalculateError::DivisionByZero => "tool.invalid_arguments.division_by_zero",
            CalculateError::ResultOutOfRange => "tool.invalid_arguments.result_out_of_range",
            CalculateError::ExpressionTooLong => "tool.invalid_arguments.expression_too_long",
            CalculateError::ExpressionTooDeep => "tool.invalid_arguments.expression_too_deep",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Add,
    Subtract,
    Multiply,
    Divide,
    Remainder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Number(i64),
    Operator(Operator),
    Open,
    Close,
}

impl Token {
    fn describe(self) -> String {
        match self {
            Token::Number(n) => format!("number {n}"),
            Token::Operator(op) => format!("'{}'", op.symbol()),
            Token::Open => "'('".to_owned(),
            Token::Close => "')'".to_owned(),
        }
    }
}

impl Operator {
    fn symbol(self) -> char {
        match self {
            Operator::Add => '+',
            Operator::Subtract => '-',
            Operator::Multiply => '*',
            Operator::Divide => '/',
            Operator::Remainder => '%',
        }
    }

    fn apply(self, left: i64, right: i64) -> Result<i64, CalculateError> {
        let result = match self {
            Operator::Add => left.checked_add(right),
            Operator::Subtract => left.checked_sub(right),
            Operator::Multiply => left.checked_mul(right),
            // Rust's `/` and `%` truncate toward zero, as §12.5 requires.
            Operator::Divide | Operator::Remainder if right == 0 => {
                return Err(CalculateError::DivisionByZero);
            }
            Operator::Divide => left.checked_div(right),
            Operator::Remainder if right == -1 => Some(0),
            Operator::Remainder => left.checked_rem(right),
        };
        result.ok_or(CalculateError::ResultOutOfRange)
    }
}

fn lex(expression: &str) -> Result<Vec<Token>, CalculateError> {
    let mut tokens = Vec::new();
    let mut chars = expression.char_indices().peekable();
    while let Some((position, c)) = chars.next() {
        let token = match c {
            ' ' | '\t' | '\r' | '\n' => continue,
            '+' => Token::Operator(Operator::Add),
            '-' => Token::Operator(Operator::Subtract),
            '*' => Token::Operator(Operator::Multiply),
            '/' => Token::Operator(Operator::Divide),
            '%' => Token::Operator(Operator::Remainder),
            '(' => Token::Open,
            ')' => Token::Close,
            '0'..='9' => {
                let mut digits = 1;
                let mut value = i64::from(c as u8 - b'0');
                while let Some(&(_, d @ '0'..='9')) = chars.peek() {
                    chars.next();
                    digits += 1;
                    if digits > MAX_LITERAL_DIGITS {
                        return Err(CalculateError::Syntax(format!(
                            "the integer at offset {position} has more than {MAX_LITERAL_DIGITS} digits"
                        )));
                    }
                    // Cannot overflow: at most 18 digits reach here.
                    value = value * 10 + i64::from(d as u8 - b'0');
                }
                Token::Number(value)
            }
            other => {
                return Err(CalculateError::Syntax(format!(
                    "unexpected character {other:?} at offset {position}"
                )));
            }
        };
        if tokens.len() == MAX_TOKENS {
            return Err(CalculateError::ExpressionTooLong);
        }
        tokens.push(token);
    }
    Ok(tokens)
}

/// A parsed expression; its depth is bounded by the token count, so evaluating it recursively
/// is bounded too.
#[derive(Debug)]
enum Node {
    Number(i64),
    Negate(Box<Node>),
    Binary(Operator, Box<Node>, Box<Node>),
}

impl Node {
    fn evaluate(&self) -> Result<i64, CalculateError> {
        match self {
            Node::Number(n) => Ok(*n),
            Node::Negate(inner) => inner
                .evaluate()?
                .checked_neg()
                .ok_or(CalculateError::ResultOutOfRange),
            Node::Binary(op, left, right) => {
                let left = left.evaluate()?;
                let right = right.evaluate()?;
                op.apply(left, right)
            }
        }
    }
}

/// Recursive descent: `expr := term (("+"|"-") term)*`, `term := unary (("*"|"/"|"%")
/// unary)*`, `unary := "-" unary | primary`, `primary := integer | "(" expr ")"`.
struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<Token> {
        self.tokens.get(self.at).copied()
    }

    fn unexpected(&self) -> CalculateError {
        match self.peek() {
            Some(token) => CalculateError::Syntax(format!(
                "unexpected {} at token {}",
                token.describe(),
                self.at + 1
            )),
            None => CalculateError::Syntax("unexpected end of expression".to_owned()),
        }
    }

    fn expression(&mut self) -> Result<Node, CalculateError> {
        let mut left = self.term()?;
        while let Some(Token::Operator(op @ (Operator::Add | Operator::Subtract))) = self.peek() {
            self.at += 1;
            let right = self.term()?;
            left = Node::Binary(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn term(&mut self) -> Result<Node, CalculateError> {
        let mut left = self.unary()?;
        while let Some(Token::Operator(
            op @ (Operator::Multiply | Operator::Divide | Operator::Remainder),
        )) = self.peek()
        {
            self.at += 1;
            let right = self.unary()?;
            left = Node::Binary(op, Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    /// Counts a chain of unary minuses iteratively so a chain costs no parser recursion.
    fn unary(&mut self) -> Result<Node, CalculateError> {
        let mut negations = 0usize;
        while self.peek() == Some(Token::Operator(Operator::Subtract)) {
            self.at += 1;
            negations += 1;
        }
        let mut node = self.primary()?;
        for _ in 0..negations {
            node = Node::Negate(Box::new(node));
        }
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, CalculateError> {
        match self.peek() {
            Some(Token::Number(n)) => {
                self.at += 1;
                Ok(Node::Number(n))
            }
            Some(Token::Open) => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(CalculateError::ExpressionTooDeep);
                }
                self.at += 1;
                let inner = self.expression()?;
                if self.peek() != Some(Token::Close) {
                    return Err(self.unexpected());
                }
                self.at += 1;
                self.depth -= 1;
                Ok(inner)
            }
            _ => Err(self.unexpected()),
        }
    }
}

/// Evaluates an expression of the §12.5 language.
pub fn evaluate(expression: &str) -> Result<i64, CalculateError> {
    let tokens = lex(expression)?;
    if tokens.is_empty() {
        return Err(CalculateError::Syntax("empty expression".to_owned()));
    }
    let mut parser = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let tree = parser.expression()?;
    if parser.at != parser.tokens.len() {
        return Err(parser.unexpected());
    }
    tree.evaluate()
}

/// The `math.calculate` tool: output `{expression, result}` with the result as a decimal string,
/// so planners that read JSON numbers as doubles still see every digit.
#[derive(Debug, Clone)]
pub struct MathCalculate {
    spec: ToolSpec,
}

impl MathCalculate {
    pub fn new() -> MathCalculate {
        MathCalculate {
            spec: math_calculate_spec(),
        }
    }

    fn run(args: &JsonMap) -> Result<ToolSuccess, ToolFailure> {
        let Some(expression) = args.get("expression").and_then(Value::as_str) else {
            return Err(ToolFailure::new(
                ToolFailureKind::InvalidArguments,
                "tool.arguments_invalid",
                "property 'expression' must be a string",
            ));
        };
        match evaluate(expression) {
            Ok(result) => Ok(ToolSuccess {
                structured: json!({"expression": expression, "result": result.to_string()}),
                trust: None,
            }),
            Err(error) => Err(ToolFailure::new(
                ToolFailureKind::InvalidArguments,
                error.reason_code(),
                error.to_string(),
            )),
        }
    }
}

impl Default for MathCalculate {
    fn default() -> Self {
        MathCalculate::new()
    }
}

impl Tool for MathCalculate {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn invoke<'a>(
        &'a self,
        _ctx: &'a ToolContext<'a>,
        args: &'a JsonMap,
    ) -> BoxFut<'a, Result<ToolSuccess, ToolFailure>> {
        Box::pin(std::future::ready(MathCalculate::run(args)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::time::Timestamp;
    use crate::tool::builtin::testing::invoke;

    fn value(expression: &str) -> i64 {
        evaluate(expression).unwrap_or_else(|e| panic!("{expression:?}: {e}"))
    }

    fn code(expression: &str) -> &'static str {
        evaluate(expression).map_or_else(
            |e| e.reason_code(),
            |v| panic!("{expression:?} evaluated to {v}"),
        )
    }

    #[test]
    fn the_spec_example() {
        let out = invoke(
            &MathCalculate::new(),
            json!({"expression": "17 * 23"}),
            Timestamp::from_micros(0),
        )
        .unwrap();
        assert_eq!(
            out.structured,
            json!({"expression": "17 * 23", "result": "391"})
        );
        assert_eq!(out.trust, None);
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(value("1 + 2 * 3"), 7);
        assert_eq!(value("(1 + 2) * 3"), 9);
        assert_eq!(value("10 - 4 - 3"), 3);
        assert_eq!(value("100 / 10 / 5"), 2);
        assert_eq!(value("2 * 3 % 4"), 2);
        assert_eq!(value("7 % 4 * 3"), 9);
        assert_eq!(value("1+2*3-4/2%3"), 5);
        assert_eq!(value("\t42\n"), 42);
        assert_eq!(value("007"), 7);
    }

    #[test]
    fn division_and_remainder_truncate_toward_zero() {
        assert_eq!(value("7 / 2"), 3);
        assert_eq!(value("-7 / 2"), -3);
        assert_eq!(value("7 / -2"), -3);
        assert_eq!(value("-7 % 2"), -1);
        assert_eq!(value("7 % -2"), 1);
        assert_eq!(code("1 / 0"), "tool.invalid_arguments.division_by_zero");
        assert_eq!(
            code("1 % (2 - 2)"),
            "tool.invalid_arguments.division_by_zero"
        );
    }

    #[test]
    fn unary_minus_chains() {
        assert_eq!(value("-5"), -5);
        assert_eq!(value("--5"), 5);
        assert_eq!(value("- - -5"), -5);
        assert_eq!(value("2 - -3"), 5);
        assert_eq!(value("2 * -3"), -6);
        assert_eq!(value("-2 * -3"), 6);
        assert_eq!(value("-(2 + 3)"), -5);
        assert_eq!(value("-(-(-(1)))"), -1);
        assert_eq!(value(&format!("{}1", "-".repeat(127))), -1);
        assert_eq!(
            code(&format!("{}1", "-".repeat(128))),
            "tool.invalid_arguments.expression_too_long"
        );
        assert_eq!(code("+5"), "tool.invalid_arguments.syntax");
        assert_eq!(code("5 -"), "tool.invalid_arguments.syntax");
    }

    #[test]
    fn checked_arithmetic_reports_out_of_range() {
        let max = "922337203685477580 * 10 + 7";
        assert_eq!(value(max), i64::MAX);
        let min = "(-922337203685477580 * 10 - 8)";
        assert_eq!(value(min), i64::MIN);
        assert_eq!(
            code(&format!("{max} + 1")),
            "tool.invalid_arguments.result_out_of_range"
        );
        assert_eq!(
            code(&format!("{min} - 1")),
            "tool.invalid_arguments.result_out_of_range"
        );
        assert_eq!(
            code(&format!("{min} / -1")),
            "tool.invalid_arguments.result_out_of_range"
        );
        assert_eq!(
            code(&format!("-{min}")),
            "tool.invalid_arguments.result_out_of_range"
        );
        assert_eq!(
            code(&format!("{min} * -1")),
            "tool.invalid_arguments.result_out_of_range"
        );
        assert_eq!(value(&format!("{min} % -1")), 0);
        assert_eq!(value(&format!("{min} / 1")), i64::MIN);
        assert_eq!(
            code("999999999999999999 * 999999999999999999"),
            "tool.invalid_arguments.result_out_of_range"
        );
    }

    #[test]
    fn literals_have_at_most_18_digits() {
        assert_eq!(value("999999999999999999"), 999_999_999_999_999_999);
        assert_eq!(value("-999999999999999999"), -999_999_999_999_999_999);
        assert_eq!(code("1000000000000000000"), "tool.invalid_arguments.syntax");
        assert_eq!(code("0000000000000000001"), "tool.invalid_arguments.syntax");
    }

    #[test]
    fn syntax_errors() {
        for bad in [
            "", "   ", "1 2", "(1", "1)", "()", "1 +* 2", "* 1", "1.5", "1e3", "2 ^ 3", "x", "１",
            "(1)(2)",
        ] {
            assert_eq!(code(bad), "tool.invalid_arguments.syntax", "{bad:?}");
        }
        assert_eq!(
            evaluate("1 + )"),
            Err(CalculateError::Syntax(
                "unexpected ')' at token 3".to_owned()
            ))
        );
        assert_eq!(
            evaluate("1 +"),
            Err(CalculateError::Syntax(
                "unexpected end of expression".to_owned()
            ))
        );
    }

    #[test]
    fn a_syntax_error_wins_over_an_arithmetic_one() {
        assert_eq!(code("1 / 0 +"), "tool.invalid_arguments.syntax");
    }

    #[test]
    fn token_and_depth_limits() {
        let sum_of_64 = vec!["1"; 64].join("+"); // 64 numbers and 63 operators: 127 tokens.
        assert_eq!(value(&sum_of_64), 64);
        let group = format!("({})", vec!["1"; 63].join("+")); // 63 + 62 + 2 = 127 tokens.
        assert_eq!(value(&format!("-{group}")), -63); // 128 tokens: the limit itself.
        let too_long = vec!["1"; 65].join("+"); // 129 tokens.
        assert_eq!(
            code(&too_long),
            "tool.invalid_arguments.expression_too_long"
        );

        let nested = |depth: usize| format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
        assert_eq!(value(&nested(32)), 1);
        assert_eq!(
            code(&nested(33)),
            "tool.invalid_arguments.expression_too_deep"
        );
        // Depth counts open parentheses, not siblings: many shallow groups are fine.
        assert_eq!(value(&vec!["(1)"; 30].join("+")), 30); // 119 tokens, depth 1.
    }

    #[test]
    fn failures_are_invalid_arguments_with_the_reason_code() {
        let failure = invoke(
            &MathCalculate::new(),
            json!({"expression": "1/0"}),
            Timestamp::from_micros(0),
        )
        .unwrap_err();
        assert_eq!(failure.kind, ToolFailureKind::InvalidArguments);
        assert_eq!(
            failure.reason_code,
            "tool.invalid_arguments.division_by_zero"
        );
        assert!(!failure.retryable);
        let failure = invoke(
            &MathCalculate::new(),
            json!({"expression": "1 +"}),
            Timestamp::from_micros(0),
        )
        .unwrap_err();
        assert_eq!(failure.reason_code, "tool.invalid_arguments.syntax");
    }
}
