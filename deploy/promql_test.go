package deploy

import (
	"fmt"
	"regexp"
	"strings"
)

// promqlRefs is what one PromQL expression reads: its series selectors and
// the labels it groups or matches by (by, without, on, ignoring,
// group_left, group_right).
//
// readPromQL is no full parser: github.com/prometheus/prometheus's parser
// needs a go.mod that moves client-go, the Kubernetes API types and a dozen
// more modules of the service itself to newer versions, for one test. It
// reads the tokens of PromQL and refuses what a dashboard gets wrong:
// unbalanced brackets, an unknown function, a matcher that is not
// label op "string", a bad duration, a range vector where an instant
// vector goes, and a range function without its range.
type promqlRefs struct {
	Selectors []seriesSelector
	Grouping  []string
}

// seriesSelector is a metric name and the labels its matchers name.
type seriesSelector struct {
	Metric string
	Labels []string
}

// promqlAggregations are PromQL's aggregation operators: they take by or
// without before or after their arguments.
var promqlAggregations = setOf("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio")

// promqlRangeFunctions take a range vector; every other function and
// aggregation takes instant vectors or scalars.
var promqlRangeFunctions = setOf("rate", "irate", "increase", "delta", "idelta", "deriv", "predict_linear", "changes",
	"resets", "holt_winters", "double_exponential_smoothing", "avg_over_time", "min_over_time", "max_over_time",
	"sum_over_time", "count_over_time", "quantile_over_time", "stddev_over_time", "stdvar_over_time",
	"last_over_time", "present_over_time", "absent_over_time", "mad_over_time")

// promqlFunctions are PromQL's other functions.
var promqlFunctions = setOf("abs", "absent", "ceil", "clamp", "clamp_max", "clamp_min", "day_of_month", "day_of_week",
	"day_of_year", "days_in_month", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction",
	"histogram_quantile", "histogram_stddev", "histogram_stdvar", "histogram_sum", "hour", "label_join",
	"label_replace", "ln", "log2", "log10", "minute", "month", "round", "scalar", "sgn", "sort", "sort_desc",
	"sort_by_label", "sort_by_label_desc", "sqrt", "time", "timestamp", "vector", "year", "acos", "acosh", "asin",
	"asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh", "deg", "rad", "pi")

// promqlGroupings are the modifiers followed by a list of labels.
var promqlGroupings = setOf("by", "without", "on", "ignoring", "group_left", "group_right")

// promqlKeywords are the other words that are neither metrics nor functions.
var promqlKeywords = setOf("bool", "and", "or", "unless", "atan2", "offset", "inf", "nan")

func setOf(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

type promqlToken struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'r' [range], 'p' punctuation
	text string
}

var (
	promqlIdent    = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlNumber   = regexp.MustCompile(`^(([0-9]+(ms|s|m|h|d|w|y))+|0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?)`)
	promqlDuration = `([0-9]+(ms|s|m|h|d|w|y))+`
	// A range [5m], or a subquery's [5m:] and [5m:1m].
	promqlRange = regexp.MustCompile(`^` + promqlDuration + `(:(` + promqlDuration + `)?)?$`)
)

// lexPromQL splits expr into tokens.
func lexPromQL(expr string) ([]promqlToken, error) {
	var out []promqlToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			out = append(out, promqlToken{'s', expr[i+1 : j]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(expr[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d", i)
			}
			r := strings.TrimSpace(expr[i+1 : i+j])
			if !promqlRange.MatchString(r) {
				return nil, fmt.Errorf("bad range [%s]", r)
			}
			out = append(out, promqlToken{'r', r})
			i += j + 1
		case promqlNumber.MatchString(expr[i:]) && (c >= '0' && c <= '9' || c == '.'):
			n := promqlNumber.FindString(expr[i:])
			out = append(out, promqlToken{'n', n})
			i += len(n)
		case promqlIdent.MatchString(expr[i:]):
			n := promqlIdent.FindString(expr[i:])
			out = append(out, promqlToken{'i', n})
			i += len(n)
		default:
			op := ""
			for _, o := range []string{"==", "!=", "<=", ">=", "=~", "!~", "+", "-", "*", "/", "%", "^", "<", ">", "=", "(", ")", "{", "}", ","} {
				if strings.HasPrefix(expr[i:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			out = append(out, promqlToken{'p', op})
			i += len(op)
		}
	}
	return out, nil
}

// readPromQL returns what expr reads, or why it is not PromQL.
func readPromQL(expr string) (promqlRefs, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promqlRefs{}, err
	}
	var refs promqlRefs
	at := func(i int) promqlToken {
		if i < len(toks) {
			return toks[i]
		}
		return promqlToken{}
	}
	// One frame per open parenthesis: the function it calls, if any.
	type frame struct {
		fn       string
		wantsRng bool
		gotRng   bool
	}
	var stack []frame
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == 'i' && promqlGroupings[t.text]:
			if at(i+1).text != "(" {
				if t.text == "group_left" || t.text == "group_right" {
					continue // the label list is optional
				}
				return refs, fmt.Errorf("%s without its label list", t.text)
			}
			j := i + 2
			for ; at(j).text != ")"; j++ {
				switch tj := at(j); {
				case tj.kind == 'i':
					refs.Grouping = append(refs.Grouping, tj.text)
				case tj.text == ",":
				default:
					return refs, fmt.Errorf("%s list holds %q", t.text, tj.text)
				}
			}
			i = j
		case t.kind == 'i' && promqlKeywords[t.text]:
			if t.text == "offset" && !regexp.MustCompile(`^`+promqlDuration+`$`).MatchString(at(i+1).text) {
				return refs, fmt.Errorf("offset without a duration")
			}
		case t.kind == 'i' && promqlAggregations[t.text] && promqlGroupings[at(i+1).text]:
			// sum by (x) (...): the parenthesis after the list opens it.
		case t.kind == 'i' && at(i+1).text == "(":
			if !promqlAggregations[t.text] && !promqlFunctions[t.text] && !promqlRangeFunctions[t.text] {
				return refs, fmt.Errorf("unknown function %s", t.text)
			}
			stack = append(stack, frame{fn: t.text, wantsRng: promqlRangeFunctions[t.text]})
			i++
		case t.kind == 'i':
			sel := seriesSelector{Metric: t.text}
			if at(i+1).text == "{" {
				labels, name, n, err := readMatchers(toks[i+2:])
				if err != nil {
					return refs, fmt.Errorf("%s: %w", t.text, err)
				}
				if name != "" {
					return refs, fmt.Errorf("%s names its metric twice", t.text)
				}
				sel.Labels = labels
				i += 1 + n
			}
			refs.Selectors = append(refs.Selectors, sel)
		case t.text == "{":
			labels, name, n, err := readMatchers(toks[i+1:])
			if err != nil {
				return refs, err
			}
			if name == "" {
				return refs, fmt.Errorf("a selector without a metric name")
			}
			refs.Selectors = append(refs.Selectors, seriesSelector{Metric: name, Labels: labels})
			i += n
		case t.text == "(":
			stack = append(stack, frame{})
		case t.text == ")":
			if len(stack) == 0 {
				return refs, fmt.Errorf("unbalanced )")
			}
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if f.wantsRng && !f.gotRng {
				return refs, fmt.Errorf("%s without a range", f.fn)
			}
		case t.kind == 'r':
			if p := at(i - 1); i == 0 || p.kind != 'i' && p.text != "}" && p.text != ")" {
				return refs, fmt.Errorf("range [%s] after %q", t.text, p.text)
			}
			if len(stack) == 0 || !stack[len(stack)-1].wantsRng {
				return refs, fmt.Errorf("range vector [%s] where an instant vector goes", t.text)
			}
			stack[len(stack)-1].gotRng = true
		case t.text == "}":
			return refs, fmt.Errorf("unbalanced }")
		}
	}
	if len(stack) > 0 {
		return refs, fmt.Errorf("unbalanced (")
	}
	return refs, nil
}

// readMatchers reads label matchers up to the closing brace; it returns the
// labels named, the metric name a __name__="..." matcher gives, and how
// many tokens it read, the brace included.
func readMatchers(toks []promqlToken) (labels []string, name string, n int, err error) {
	for i := 0; i < len(toks); i++ {
		if toks[i].text == "}" {
			return labels, name, i + 1, nil
		}
		if i+2 >= len(toks) || toks[i].kind != 'i' || toks[i+2].kind != 's' {
			return nil, "", 0, fmt.Errorf("matcher is not label op \"string\"")
		}
		switch op := toks[i+1].text; op {
		case "=", "!=", "=~", "!~":
			if toks[i].text == "__name__" && op == "=" {
				name = toks[i+2].text
			} else {
				labels = append(labels, toks[i].text)
			}
		default:
			return nil, "", 0, fmt.Errorf("matcher operator %q", op)
		}
		i += 3
		if i < len(toks) && toks[i].text == "}" {
			return labels, name, i + 1, nil
		}
		if i >= len(toks) {
			break
		}
		if toks[i].text != "," {
			return nil, "", 0, fmt.Errorf("matchers not separated by commas")
		}
	}
	return nil, "", 0, fmt.Errorf("unbalanced {")
}
