package chattemplate

import (
	"strconv"
	"strings"
)

// printf is Python's printf-style str % args for the conversions s r d i c x X o f F e E and %%,
// with flags (-, +, space, 0), width and precision. Mapping keys and * widths are refused.
func printf(format string, args []value) (string, error) {
	var b strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", rerr("ValueError: incomplete format")
		}
		if format[i] == '%' {
			b.WriteByte('%')
			continue
		}
		if format[i] == '(' || format[i] == '*' {
			return "", rerr("printf-style formatting with mapping keys or * is not supported")
		}
		var left, plus, space, zero bool
	flags:
		for ; i < len(format); i++ {
			switch format[i] {
			case '-':
				left = true
			case '+':
				plus = true
			case ' ':
				space = true
			case '0':
				zero = true
			case '#':
				return "", rerr("printf-style alternate form (#) is not supported")
			default:
				break flags
			}
		}
		width, prec := 0, -1
		for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
			width = width*10 + int(format[i]-'0')
		}
		if i < len(format) && format[i] == '.' {
			prec = 0
			for i++; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
				prec = prec*10 + int(format[i]-'0')
			}
		}
		for i < len(format) && (format[i] == 'l' || format[i] == 'h' || format[i] == 'L') {
			i++
		}
		if i >= len(format) {
			return "", rerr("ValueError: incomplete format")
		}
		if next >= len(args) {
			return "", rerr("TypeError: not enough arguments for format string")
		}
		arg := args[next]
		next++
		var body string
		numeric := false
		switch conv := format[i]; conv {
		case 's', 'r':
			var err error
			if conv == 's' {
				body, err = pyStr(arg)
			} else {
				body, err = pyRepr(arg)
			}
			if err != nil {
				return "", err
			}
			if prec >= 0 && prec < len([]rune(body)) {
				body = string([]rune(body)[:prec])
			}
		case 'd', 'i', 'x', 'X', 'o':
			if !isNumber(arg) {
				return "", rerr("TypeError: %%%c format: a real number is required, not %s", conv, typeName(arg))
			}
			var n int64
			if arg.IsFloat() {
				n = int64(arg.AsFloat())
			} else {
				n = asInt(arg)
			}
			base := map[byte]int{'d': 10, 'i': 10, 'x': 16, 'X': 16, 'o': 8}[conv]
			body = strconv.FormatInt(n, base)
			if conv == 'X' {
				body = strings.ToUpper(body)
			}
			numeric = true
		case 'c':
			switch {
			case isIntLike(arg):
				n := asInt(arg)
				if n < 0 || n > 0x10ffff {
					return "", rerr("OverflowError: %%c arg not in range(0x110000)")
				}
				body = string(rune(n))
			case arg.IsString() && len([]rune(arg.AsString())) == 1:
				body = arg.AsString()
			default:
				return "", rerr("TypeError: %%c requires an int or a unicode character")
			}
		case 'f', 'F', 'e', 'E':
			if !isNumber(arg) {
				return "", rerr("TypeError: must be real number, not %s", typeName(arg))
			}
			if prec < 0 {
				prec = 6
			}
			body = strconv.FormatFloat(asFloat(arg), conv|0x20, prec, 64)
			if conv == 'E' || conv == 'F' {
				body = strings.ToUpper(body)
			}
			numeric = true
		default:
			return "", rerr("printf-style conversion %%%c is not supported", conv)
		}
		if numeric {
			neg := strings.HasPrefix(body, "-")
			digits := strings.TrimPrefix(body, "-")
			sign := ""
			switch {
			case neg:
				sign = "-"
			case plus:
				sign = "+"
			case space:
				sign = " "
			}
			if zero && !left && len(sign)+len(digits) < width {
				digits = strings.Repeat("0", width-len(sign)-len(digits)) + digits
			}
			body = sign + digits
		}
		if pad := width - len([]rune(body)); pad > 0 {
			if left {
				body += strings.Repeat(" ", pad)
			} else {
				body = strings.Repeat(" ", pad) + body
			}
		}
		b.WriteString(body)
	}
	if next < len(args) {
		return "", rerr("TypeError: not all arguments converted during string formatting")
	}
	return b.String(), nil
}
