package tokenizer

import (
	"strings"
)

// This file generates the adversarial strings of testdata/tiktoken_corpus.jsonl.gz, which
// testdata/tiktoken_golden.py encodes with OpenAI's tiktoken. Deterministic (SplitMix64, fixed seed,
// fixed alphabets); TestGoldenCorpusUpToDate keeps the committed file equal to it.
//
// Every character below was assigned by Unicode 14 with the same general category and script ever
// since, so Go's tables (Unicode 15.0) and those of the regex crate behind tiktoken agree on them.

// goldenRandomCount is the number of random compositions; with the fixed and long cases the corpus has
// a little over 12,000 strings.
const goldenRandomCount = 12000

var (
	genLower    = []rune("abcdefghijklmnopqrstuvwxyz")
	genHan      = []rune("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严龙飞")
	genHanRare  = []rune("㐀㐁䶵𠀀𠀁𪚥豈更々〇〻〡〢⺀⺁⼀⼁")
	genKana     = []rune("あいうえおかきくけこさしすせそがぎぐゃゅょっアイウエオカキクケコサシスセソガギグャュョッー・ｱｲｳｴｵｶｷｸﾞﾟゝゞヽヾ")
	genHangul   = []rune("가나다라마바사아자차카타파하한국어글ᄀ까ᅢᆨᆩ")
	genCyrillic = []rune("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґІЇЄҐ")
	genGreek    = []rune("αβγδεζηθικλμνξοπρσςτυφχψωάέήίόύώΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩᾈᾉᾼῌ")
	genArabic   = []rune("ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئةى\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652")
	genHebrew   = []rune("אבגדהוזחטיכלמנסעפצקרשתךםןףץ\u05b0\u05b4\u05b7\u05bc")
	genIndic    = []rune("अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह\u093e\u093f\u0940\u0941\u0942\u0947\u0948\u094b\u094c\u094d\u0902\u0903")
	genThai     = []rune("กขคงจฉชซญดตถทนบปผพฟภมยรลวศษสหอฮะาำเแโใไ\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39\u0e47\u0e48\u0e49\u0e4a\u0e4b")
	genLatinExt = []rune("éèêëàâäçñøåæœßẞİıſﬁŉǅǈǋǲʰʲʷˆˇªº𝐀𝐚𝑨𝒂ĀāŁłŒőŰűẞ")
	genDigits   = []rune("0123456789٠١٢٣٤٥٦٧٨٩۰۱۲۳۴۵۶۷۸۹०१२३४५६७८९๐๑๒๓๔๕๖๗๘๙０１２３４５６７８９𝟎𝟏𝟐𝟑𝟗½¾²³¹①②⑩ⅠⅡⅫⅻ")
	genSpace    = []string{" ", " ", " ", " ", "\t", "\n", "\n", "\r\n", "\r", "\v", "\f", "\u0085", "\u00a0", "\u1680",
		"\u2000", "\u2003", "\u2007", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"}
	genNotSpace = []string{"\u200b", "\u180e", "\ufeff", "\x1c", "\x1d", "\x1e", "\x1f", "\u2060"}
	genPunct    = []rune("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~，。！？、「」『』《》…—–·•€£¥©®™°±×÷∑√∞≠≈→⇒←↑─│┌┐§¶†‡′″‹›«»¿¡")
	genEmoji    = []string{"😀", "👍", "👍🏽", "👨\u200d👩\u200d👧\u200d👦", "❤\ufe0f", "🇫🇷", "🇯🇵", "🏳\ufe0f\u200d🌈", "1\ufe0f\u20e3",
		"🧑🏾\u200d💻", "✈\ufe0e", "🫠", "🎉", "🙏"}
	genMarks    = []string{"\u0301", "\u0308", "\u0327", "\u20dd", "\u0903", "\ufe0f", "\u302a", "\U000e0100", "\u1ab0", "\u0651", "\u05bc"}
	genControls = []string{"\x00", "\x07", "\x1b", "\x7f", "\u0080", "\u009f", "\ue000", "\uf8ff", "\U0010fffd", "\ufffd", "\ufffc"}
	genContract = []string{"'s", "'S", "'t", "'T", "'re", "'RE", "'Re", "'rE", "'ve", "'VE", "'vE", "'m", "'M", "'ll", "'LL",
		"'lL", "'d", "'D", "'ſ", "'x", "'", "’s", "'l", "'r", "'v"}
	genCode = []string{"fmt.Println(x)", "if (a&&b) { return; }", "x += 1;", "#include <stdio.h>", "<|open|>", "[BOS]",
		"def f(x):\n    return x**2\n", "\tfor i := range n {\n\t\t", "SELECT * FROM t;", "</div>", "0x7fff_ffff", "a_b-c.d",
		"$HOME/.config", "C:\\Windows", "https://example.org/a?b=1&c=2", "//go:embed", "e.g.", "i.e.,", "3.14e-10", "1,000,000"}
)

// genFragment returns one fragment of a random kind.
func genFragment(r *splitMix) string {
	pick := func(rs []rune, lo, hi int) string {
		var b strings.Builder
		for range lo + r.intn(hi-lo+1) {
			b.WriteRune(rs[r.intn(len(rs))])
		}
		return b.String()
	}
	one := func(xs []string) string { return xs[r.intn(len(xs))] }
	switch k := r.intn(100); {
	case k < 22: // Latin words in every case shape
		w := pick(genLower, 1, 9)
		switch r.intn(5) {
		case 0:
			w = strings.ToUpper(w[:1]) + w[1:]
		case 1:
			w = strings.ToUpper(w)
		case 2:
			w = w + strings.ToUpper(pick(genLower, 1, 3)) + pick(genLower, 0, 4)
		}
		return w
	case k < 28:
		return one(genContract)
	case k < 36:
		return pick(genHan, 1, 6)
	case k < 38:
		return pick(genHanRare, 1, 3)
	case k < 41:
		return pick(genKana, 1, 5)
	case k < 43:
		return pick(genHangul, 1, 4)
	case k < 46:
		return pick(genCyrillic, 1, 8)
	case k < 48:
		return pick(genGreek, 1, 6)
	case k < 50:
		return pick(genArabic, 1, 6)
	case k < 51:
		return pick(genHebrew, 1, 5)
	case k < 53:
		return pick(genIndic, 1, 6)
	case k < 54:
		return pick(genThai, 1, 6)
	case k < 58:
		return pick(genLatinExt, 1, 3)
	case k < 64:
		return pick(genDigits[:10], 1, 8)
	case k < 66:
		return pick(genDigits, 1, 5)
	case k < 75:
		var b strings.Builder
		for range 1 + r.intn(4) {
			b.WriteString(one(genSpace))
		}
		return b.String()
	case k < 77:
		return one(genNotSpace)
	case k < 83:
		return pick(genPunct, 1, 4)
	case k < 87:
		return one(genEmoji)
	case k < 90:
		return one(genMarks)
	case k < 91:
		return one(genControls)
	default:
		return one(genCode)
	}
}

// goldenCorpus returns the test strings: fixed cases, random compositions, then long inputs that cross
// the long-input limits.
func goldenCorpus() []string {
	out := []string{
		"Hello world", "你好世界", "The capital of France is", " Paris", "HELLOworld", "DON'T I'M we'LL",
		"ABʰ.", "1〇2", "  Hello", "a  \n\n  b", "it'ſ", "<|open|>message role=\"user\"<|sep|>",
	}
	r := newSplitMix(20260501)
	for range goldenRandomCount {
		var b strings.Builder
		for i := range 1 + r.intn(7) {
			if i > 0 && r.intn(2) == 0 {
				b.WriteByte(' ')
			}
			b.WriteString(genFragment(r))
		}
		out = append(out, b.String())
	}
	return append(out,
		strings.Repeat("a", MaxRunChars+1),
		strings.Repeat(" ", 30000)+"x",
		strings.Repeat("!", 26000),
		strings.Repeat("\n", MaxRunChars+5)+"end",
		strings.Repeat("字", MaxRunChars+10),
		strings.Repeat("1", 30000),
		strings.Repeat("e\u0301", 12600),
		strings.Repeat("Hello world. ", 3000),
		strings.Repeat("ab ", 133_335), // 400,005 characters: the 400,000 cut falls after an "a"
	)
}
