#!/usr/bin/env python3
"""Build the SentencePiece-Unigram reference fixtures of testdata/tokenizers/.

The Go Unigram tokenizer is checked against Hugging Face `tokenizers` in the
pipeline form XLM-RoBERTa-based encoders ship (bge-m3, jina-embeddings-v3,
multilingual-e5): a "Precompiled" normalizer holding SentencePiece's
precompiled_charsmap, a WhitespaceSplit + Metaspace pre-tokenizer, a
"Unigram" model with XLM-R's fairseq id layout (<s>=0 <pad>=1 </s>=2
<unk>=3, the SentencePiece pieces from id 4 on, <mask> last) and a
"<s> $A </s>" TemplateProcessing post-processor.

No real model's vocabulary is committed. This script trains, with the
`sentencepiece` library, a small (2000-piece) Unigram model --
normalization_rule_name="nmt_nfkc", which is what gives XLM-R its charsmap --
on committed text: train.txt beside this script (a frozen snapshot of
testdata/realmodel/calibration.txt and docs/*.md) and the multilingual lines of MULTILINGUAL below (German, French, Russian,
Greek, Chinese, Japanese, Korean, Arabic, Hindi, Thai, ..., full-width forms,
ligatures, circled digits, superscripts). It then converts the model the way
transformers 5.23 does for XLM-R: XLMRobertaTokenizer.from_pretrained on a
directory holding only sentencepiece.bpe.model, which goes through
TokenizersBackend._convert_from_sentencepiece and
convert_slow_tokenizer.XLMRobertaConverter.convert_from_spm (fairseq id
reordering, <mask> appended) and XLMRobertaTokenizer.__init__ (pipeline).
<mask> is given lstrip=True, as in the Hub's xlm-roberta-base and bge-m3.

  xlmr-unigram/tokenizer.json         the converted tokenizer.
  xlmr-unigram/tokenizer_config.json  in the form found on the Hub.
  xlmr-unigram-first/tokenizer.json   the same JSON with the Metaspace
                                      prepend_scheme (pre-tokenizer and
                                      decoder) set to "first" instead of
                                      "always", reloaded with
                                      Tokenizer.from_str to prove it loads.
  xlmr-unigram-converter/tokenizer.json
                                      the same trained model through
                                      convert_slow_tokenizer.
                                      XLMRobertaConverter(...).converted(),
                                      the form newer conversions ship:
                                      normalizer Sequence[Precompiled,
                                      Strip(right), Replace(Regex " {2,}" ->
                                      "▁")] and Metaspace
                                      (prepend_scheme "always", split true)
                                      alone as pre-tokenizer. converted()
                                      registers only <s> and </s> as added
                                      tokens; <pad>, <unk> and <mask>
                                      (lstrip) are added with the
                                      tokenizers API at their vocabulary
                                      ids, so ids and added_tokens match
                                      xlmr-unigram's.
  xlmr-unigram-metafirst/tokenizer.json
                                      xlmr-unigram-converter with the
                                      Metaspace prepend_scheme (pre-tokenizer
                                      and decoder) set to "first", reloaded
                                      with Tokenizer.from_str.
  unigram_cases.json                  {"xlmr-unigram": [...],
                                      "xlmr-unigram-first": [...],
                                      "xlmr-unigram-converter": [...],
                                      "xlmr-unigram-metafirst": [...]}, each
                                      entry {"text", "ids", "tokens",
                                      "byte_offsets"} from
                                      Tokenizer.encode(text) with the special
                                      tokens added: hand-written edge cases,
                                      then every line of the held-out text
                                      testdata/realmodel/heldout.txt (not
                                      seen in training) and the whole file.
                                      "byte_offsets" are the Python binding's
                                      character offsets converted to UTF-8
                                      byte offsets of "text".

xlmr-unigram is also loaded back with transformers' AutoTokenizer and the
other variants with PreTrainedTokenizerFast(tokenizer_file=...); all must
give the ids `tokenizers` gave on every case.

Training is deterministic (one thread, a fixed seed, a fixed input order, no
sampling or shuffling), so a re-run rewrites identical bytes.

Usage (from the repository root):
    python3 testdata/tokenizers/gen_unigram.py
The script re-runs itself in .tools/fixture-venv (see
testdata/fixtures/fixture_venv.py), installing the pinned sentencepiece (and
protobuf, which transformers' converter needs) there when missing.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
from fixture_venv import ensure_venv  # noqa: E402

ensure_venv()

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SENTENCEPIECE_PIN = "sentencepiece==0.2.3"
PROTOBUF_PIN = "protobuf==7.36.2"


def ensure_sentencepiece():
    """Install the pinned sentencepiece (and protobuf, if missing) into the
    venv and re-execute this script once."""
    need = []
    try:
        import sentencepiece
        if sentencepiece.__version__ != SENTENCEPIECE_PIN.split("==")[1]:
            need.append(SENTENCEPIECE_PIN)
    except ImportError:
        need.append(SENTENCEPIECE_PIN)
    try:
        import google.protobuf  # noqa: F401
    except ImportError:
        need.append(PROTOBUF_PIN)
    if not need:
        return
    if os.environ.get("GEN_UNIGRAM_REEXEC"):
        sys.exit("gen_unigram: %s still missing after installing" % need)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q"] + need)
    os.environ["GEN_UNIGRAM_REEXEC"] = "1"
    os.execv(sys.executable, [sys.executable] + sys.argv)


ensure_sentencepiece()

import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import AddedToken, Tokenizer  # noqa: E402

VOCAB_SIZE = 2000
SEED = 20240601

# Multilingual training text, written for this fixture. Together with the
# English of calibration.txt and docs/*.md it makes the vocabulary see every
# script the cases use. Characters the cases use for the unknown-token path
# (U+2000B, U+9F98, U+10000, the ZWJ/skin-tone/flag emoji) must stay out of it.
MULTILINGUAL = """\
Der Zug nach Hamburg fährt jeden Morgen um sieben Uhr ab.
Die Straße vor unserem Haus wird nächste Woche gesperrt.
Im Frühling blühen die Apfel- und Kirschbäume im Garten.
Können Sie mir bitte sagen, wo der Bahnhof ist?
Das Wetter war gestern kühl, aber heute scheint die Sonne.
Meine Großmutter backt jeden Sonntag einen Käsekuchen.
Die Bücherei öffnet um neun Uhr und schließt um achtzehn Uhr.
Wir müssen die Rechnung bis Ende des Monats bezahlen.
Der Fußballverein hat einen neuen Trainer verpflichtet.
Über die Brücke gehen täglich tausende Menschen zur Arbeit.
Die Größe des Zimmers beträgt etwa zwanzig Quadratmeter.
Ich hätte gern einen Kaffee mit Milch und ohne Zucker.
Die Regierung plant eine Reform des Gesundheitswesens.
Kinder lernen Sprachen schneller, wenn sie sie täglich hören.
Das Museum zeigt Gemälde aus dem neunzehnten Jahrhundert.
Nach dem Gewitter roch die Luft frisch und süß.
Die Universität bietet Kurse in Physik, Chemie und Biologie an.
Er hat seinen Schlüssel im Büro vergessen.
Die Äußerungen des Ministers sorgten für große Aufregung.
Wir fahren im Sommer an die Ostsee und wandern auf Rügen.
Das Krankenhaus sucht dringend neue Pflegekräfte.
Die Preise für Strom und Gas sind stark gestiegen.
Bitte schließen Sie die Tür, wenn Sie den Raum verlassen.
Der Hund bellt jeden Tag den Briefträger an.
Die Schülerinnen und Schüler präsentierten ihr Projekt.
Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.
Die Maßnahmen gelten ab dem ersten Januar.
Straßenbahn, Fußgängerzone, Weißwurst und Schloss.
Gemütlichkeit ist schwer zu übersetzen.
Übung macht den Meister.
Le train pour Lyon part chaque matin à sept heures.
Elle a planté des tomates et du basilic le long du mur.
Où se trouve la pharmacie la plus proche, s'il vous plaît ?
Le café était fermé, alors nous sommes allés au marché.
Les élèves ont présenté leur projet à toute l'école.
Il a oublié son parapluie et il est rentré sous la pluie.
La bibliothèque prête des ordinateurs aux étudiants.
Nous avons fêté notre anniversaire au bord du lac.
Le gouvernement a annoncé une réforme des retraites.
Les enfants ont construit un château de sable près de l'eau.
Ça coûte cher, mais la qualité est excellente.
Noël approche et les vitrines sont décorées.
L'hôpital a embauché davantage d'infirmières.
Le musée a rouvert après deux ans de rénovation.
Je voudrais un croissant et un café crème, s'il vous plaît.
Les œufs, le cœur et la sœur s'écrivent avec une ligature.
À l'été, les prix augmentent dans les stations balnéaires.
Où êtes-vous né ? Je suis né à Montréal.
Le maïs et le blé poussent bien dans cette région.
Les élections législatives auront lieu en juin.
Il fait très chaud aujourd'hui ; buvez beaucoup d'eau.
Cette théorie a été critiquée par de nombreux chercheurs.
La forêt était silencieuse après la première neige.
Le garçon a lu « Les Misérables » pendant les vacances.
Voilà une idée intéressante, n'est-ce pas ?
Les résultats financiers du trimestre dépassent les prévisions.
Son frère aîné travaille comme ingénieur à Genève.
L'équipe a recruté un jeune attaquant d'un petit club.
Déjà vu, naïveté, crème brûlée, façade et rôle.
Hélène préfère le thé à la menthe.
El tren a Madrid sale todas las mañanas a las siete.
¿Dónde está la farmacia más cercana?
Mi abuela prepara una paella deliciosa los domingos.
El niño pequeño aprendió a nadar este verano.
¡Qué sorpresa verte aquí después de tantos años!
La canción tiene una melodía muy alegre.
El año pasado viajamos a Perú y a México.
Los científicos midieron la temperatura del océano.
O comboio para o Porto sai todas as manhãs.
A informação está disponível no nosso site.
Não sei se ele vem amanhã ou na próxima semana.
As crianças brincam no jardim depois da escola.
Il treno per Roma parte ogni mattina alle sette.
La città è famosa per la sua università e i suoi caffè.
Perché non andiamo al mare questo fine settimana?
Pociąg do Krakowa odjeżdża codziennie o siódmej.
Zażółć gęślą jaźń.
Příliš žluťoučký kůň úpěl ďábelské ódy.
İstanbul, Türkiye'nin en kalabalık şehridir.
Çocuklar bahçede oynuyor ve ağaçlara tırmanıyor.
Işık, ılık süt ve ıhlamur çayı.
Öğretmen öğrencilere ödev verdi.
Bugün hava çok güzel, dışarı çıkalım mı?
Tiếng Việt có nhiều dấu thanh.
Hôm nay trời đẹp, chúng ta đi dạo nhé.
Tôi muốn uống một ly cà phê sữa đá.
Поезд в Москву отправляется каждое утро в семь часов.
Она посадила помидоры и базилик вдоль южной стены сада.
Где находится ближайшая аптека?
Вчера шёл сильный дождь, а сегодня светит солнце.
Моя бабушка печёт пироги каждое воскресенье.
Библиотека открывается в девять часов утра.
Мы должны оплатить счёт до конца месяца.
Футбольный клуб подписал контракт с новым тренером.
Дети быстрее учат языки, когда слышат их каждый день.
Музей показывает картины девятнадцатого века.
Правительство объявило о новой налоговой реформе.
Студенты представили свой проект всей школе.
Ёжик в тумане — известный мультфильм.
Съешь же ещё этих мягких французских булок да выпей чаю.
Цены на электричество и газ сильно выросли.
Пожалуйста, закройте дверь, когда выходите из комнаты.
Собака каждый день лает на почтальона.
Учёные измерили температуру глубокого океана.
Я забыл ключи в офисе.
Москва, Санкт-Петербург, Новосибирск и Екатеринбург.
Привет, как дела? Всё хорошо, спасибо.
Это очень интересная книга об истории России.
Зимой в Сибири бывает очень холодно.
Мы поехали на дачу на выходные.
Київ — столиця України.
Ґанок, їжак, є, і — літери української абетки.
Το τρένο για την Αθήνα φεύγει κάθε πρωί στις επτά.
Πού είναι το πλησιέστερο φαρμακείο;
Η γιαγιά μου φτιάχνει πίτα κάθε Κυριακή.
Ο καιρός ήταν κρύος χθες, αλλά σήμερα έχει ήλιο.
Τα παιδιά μαθαίνουν γλώσσες πιο γρήγορα.
Η βιβλιοθήκη ανοίγει στις εννέα το πρωί.
Το μουσείο εκθέτει αρχαία αγάλματα και αγγεία.
Οι φοιτητές παρουσίασαν την εργασία τους.
Καλημέρα σας, τι κάνετε;
Σ' ευχαριστώ πολύ για τη βοήθεια.
Ο Σωκράτης και ο Πλάτωνας ήταν φιλόσοφοι.
Η θάλασσα ήταν ήσυχη και ζεστή.
Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.
Ελληνικά γράμματα: α β γ δ ε ζ η θ ι κ λ μ ν ξ ο π ρ σ ς τ υ φ χ ψ ω.
ΟΔΥΣΣΕΥΣ και Οδυσσέας, ΣΟΦΟΣ και σοφός.
Η κυβέρνηση ανακοίνωσε νέα μέτρα για την οικονομία.
Το πλοίο καθυστέρησε λόγω ομίχλης στο λιμάνι.
Αγαπώ τη μουσική και τον χορό.
Η ομάδα κέρδισε το πρωτάθλημα.
Μαθηματικά, φυσική και χημεία.
去海边的火车每天早上七点出发。
她在花园的南墙边种了西红柿和罗勒。
最近的药店在哪里？
昨天下了大雨，今天阳光明媚。
我的奶奶每个星期天都做饺子。
图书馆早上九点开门，晚上六点关门。
我们必须在月底之前付清账单。
孩子们每天听外语，学得更快。
博物馆展出了十九世纪的绘画。
政府宣布了一项新的税收改革。
学生们向全校展示了他们的项目。
科学家测量了深海的温度。
这家餐厅因为私人活动而关闭。
我需要在旅行前更新我的护照。
北京、上海、广州和深圳都是大城市。
你好，今天天气怎么样？
他在公共汽车上丢了钱包，但有人还给了他。
机器学习和自然语言处理是人工智能的重要领域。
中文、汉字、繁體字和简体字。
春天来了，花都开了。
我喜欢喝茶，不喜欢喝咖啡。
这本书非常有意思。
请问，火车站怎么走？
长城是中国最著名的古迹之一。
谢谢你的帮助！
海岸行きの電車は毎朝七時に出発します。
彼女は庭の南側にトマトとバジルを植えました。
一番近い薬局はどこですか？
昨日は大雨でしたが、今日は晴れています。
祖母は毎週日曜日にお菓子を作ります。
図書館は午前九時に開きます。
子どもたちは毎日外国語を聞くと早く覚えます。
博物館は十九世紀の絵画を展示しています。
政府は新しい税制改革を発表しました。
科学者たちは深海の温度を測定しました。
東京、大阪、京都、そして札幌。
こんにちは、お元気ですか？
ありがとうございます。よろしくお願いします。
ひらがな、カタカナ、漢字を使って日本語を書きます。
コンピューターとソフトウェアのアップデート。
私はラーメンと寿司が大好きです。
猫が車の暖かいボンネットの上で寝ていた。
日本語のテキストを処理するのは難しいです。
桜の花が満開になりました。
ｶﾀｶﾅの半角文字もあります。
東京タワーから富士山が見えます。
新幹線はとても速いです。
会議は大きい会議室に移動しました。
電話番号を教えてください。
今日は何曜日ですか？
해안으로 가는 기차는 매일 아침 일곱 시에 출발합니다.
그녀는 정원 남쪽 벽을 따라 토마토와 바질을 심었습니다.
가장 가까운 약국은 어디에 있습니까?
어제는 비가 많이 왔지만 오늘은 맑습니다.
할머니는 일요일마다 김치찌개를 만드십니다.
도서관은 오전 아홉 시에 문을 엽니다.
아이들은 매일 외국어를 들으면 더 빨리 배웁니다.
박물관은 십구 세기 그림을 전시하고 있습니다.
정부는 새로운 세금 개혁을 발표했습니다.
과학자들은 깊은 바다의 온도를 측정했습니다.
서울, 부산, 대구, 그리고 인천.
안녕하세요, 만나서 반갑습니다.
감사합니다. 좋은 하루 보내세요.
한국어는 한글로 씁니다.
학생들이 학교 전체에 프로젝트를 발표했습니다.
저는 커피보다 차를 더 좋아합니다.
한국의 가을은 정말 아름답습니다.
지하철역이 어디에 있어요?
회의가 큰 회의실로 옮겨졌습니다.
오늘 날씨가 정말 좋네요.
يغادر القطار إلى الساحل كل صباح في الساعة السابعة.
أين أقرب صيدلية؟
زرعت الطماطم والريحان على طول جدار الحديقة.
كان الطقس باردًا أمس، لكن الشمس مشرقة اليوم.
تفتح المكتبة في الساعة التاسعة صباحًا.
يتعلم الأطفال اللغات بسرعة عندما يسمعونها كل يوم.
أعلنت الحكومة عن إصلاح ضريبي جديد.
مَرْحَبًا بِكُمْ فِي مَدِينَتِنَا الجَمِيلَةِ.
اَلْعَرَبِيَّةُ لُغَةٌ جَمِيلَةٌ.
السلام عليكم ورحمة الله وبركاته.
شكرًا جزيلًا على مساعدتك.
القاهرة، الرباط، بيروت، ودمشق مدن عريقة.
الأرقام العربية: ٠ ١ ٢ ٣ ٤ ٥ ٦ ٧ ٨ ٩.
قاس العلماء درجة حرارة المحيط العميق.
שלום, מה שלומך?
הרכבת לחיפה יוצאת כל בוקר בשבע.
तट की ओर जाने वाली ट्रेन हर सुबह सात बजे निकलती है।
निकटतम दवाखाना कहाँ है?
उसने बगीचे की दक्षिणी दीवार के साथ टमाटर और तुलसी लगाई।
कल बहुत बारिश हुई, लेकिन आज धूप खिली है।
मेरी दादी हर रविवार को खीर बनाती हैं।
पुस्तकालय सुबह नौ बजे खुलता है।
बच्चे रोज़ सुनकर भाषाएँ जल्दी सीखते हैं।
सरकार ने एक नए कर सुधार की घोषणा की।
नमस्ते, आप कैसे हैं?
धन्यवाद, मैं ठीक हूँ।
भारत की राजधानी नई दिल्ली है।
हिन्दी और संस्कृत देवनागरी लिपि में लिखी जाती हैं।
वैज्ञानिकों ने गहरे समुद्र का तापमान मापा।
क्षत्रिय, ज्ञान, श्री और द्वार जैसे संयुक्ताक्षर।
अंक: ० १ २ ३ ४ ५ ६ ७ ८ ९।
รถไฟไปชายทะเลออกทุกเช้าเวลาเจ็ดโมง
ร้านขายยาที่ใกล้ที่สุดอยู่ที่ไหน
สวัสดีครับ ยินดีที่ได้รู้จัก
ขอบคุณมากค่ะ
ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ
กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย
น้ำ ผู้ใหญ่ ที่นี่ เก่ง ไม้
ＡＢＣＤＥＦ ａｂｃｄｅｆ １２３４５６７８９０ full-width Latin.
ＨＥＬＬＯ\u3000ＷＯＲＬＤ！ with an ideographic space.
（全角括弧）と「かぎ括弧」、。・ー
ﬁnancial ﬂow, ﬀ ﬃ ﬄ ﬅ ligatures in the ﬁeld.
The oﬃce ﬁled a ﬁnal report on the ﬂoor plan.
Circled numbers: ① ② ③ ④ ⑤ ⑥ ⑦ ⑧ ⑨ ⑩ and ⑳.
Step ① mix, step ② bake, step ③ serve.
Superscripts and subscripts: x² + y² = z², 10³, H₂O, CO₂, aⁿ.
Roman numerals: Ⅰ Ⅱ Ⅲ Ⅳ Ⅴ Ⅻ ⅰ ⅱ ⅲ.
Units: 5 ㎏, 3 ㎞, 20 ℃, 100 ㎖, ㎡ and ㎥.
Ellipsis… and more… dots.
Fractions ½ ¼ ¾ and ⅓ of the cake.
Trademarks ™ ℠ and numero № 5.
Angstrom \u212b, Kelvin \u212a, Ohm \u2126, micro \u00b5.
Café, CAFÉ, résumé, façade, naïve, Zoë, Chloë.
Accents: à á â ã ä å æ ç è é ê ë ì í î ï ñ ò ó ô õ ö ø ù ú û ü ý ÿ.
Quotes “curly” ‘single’ „German“ «French» ‹single›.
Dashes – — ‐ and bullets • · and arrows → ← ↑ ↓.
Currency € £ ¥ ₹ ₽ ₩ ₺ $ ¢.
Math ≤ ≥ ≠ ± × ÷ √ ∞ ∑ ∫ π.
A non-breaking space in 10\u00a0km and a thin space in 1\u2009000.
Half-width katakana ｱｲｳｴｵ and full-width ＃＄％＆.
Emoji: 😀 😂 👍 ❤️ 🎉 🙏 are popular.
I love this 👍 and that 😀!
"""

# Hand-written edge cases. Multilingual sentences here are not in the
# training text.
CASES = [
    # empty and whitespace
    "",
    " ",
    "  ",
    "a",
    "a b",
    "a  b",
    "a   b",
    "  a",
    "a  ",
    " a ",
    "  leading and trailing  ",
    "a\tb",
    "\ta",
    "\t",
    "a\nb",
    "a\n\nb",
    "\n",
    "\r\n",
    "line one\r\nline two",
    "a \t\n b",
    "x \t \n  word",
    # Unicode spaces and invisible characters
    "non\u00a0breaking\u00a0space",
    "\u00a0lead",
    "trail\u00a0",
    "em\u2003space",
    "ideographic\u3000space",
    "\u3000",
    "thin\u2009space",
    "zero\u200bwidth",
    "\u200b",
    "a \u200b b",
    "zero\u200cwidth\u200djoiner",
    "soft\u00adhyphen",
    "\u00ad",
    "byte\ufefforder mark",
    "line\u2028separator",
    # compatibility forms (NFKC in the charsmap)
    "ＡＢＣ１２３",
    "ＨＥＬＬＯ　ＷＯＲＬＤ！",
    "ﬁnancial ﬂow",
    "ﬁ",
    "oﬃce ﬀ ﬄ",
    "①②",
    "step ⑳",
    "x²",
    "H₂O and aⁿ",
    "Ⅻ",
    "Ⅻ century",
    "㎏",
    "℃",
    "…",
    "wait…",
    "½ cup",
    "№ 5 ™",
    "ｶﾀｶﾅ",
    "\u212b \u2126 \u212a \u00b5",
    # accents, composed and decomposed
    "café",
    "cafe\u0301",
    "cafe\u0301 vs café",
    "e\u0301\u0302",
    "a\u0308\u0304",
    "\u0301",
    "x\u0301",
    "Ünïcödé",
    "naïve résumé",
    "Straße",
    "STRASSE straße",
    "İstanbul ı",
    "ΣΟΦΟΣ σοφός σοφοσ",
    "Οδυσσέας",
    "Привет мир",
    "Ёлка и ёж",
    "Київ",
    # CJK
    "中文字符",
    "我爱自然语言处理。",
    "日本語のテキスト",
    "ひらがな カタカナ 漢字",
    "東京で寿司を食べました。",
    "한국어",
    "안녕하세요 세계",
    "\u1100\u1161",
    "\u1100\u1161\u11a8",
    "\u1112\u1161\u11ab\u1100\u1173\u11af",
    # right-to-left and Indic
    "مرحبا",
    "مَرْحَبًا بِالعَالَمِ",
    "العربية ٣٤٥",
    "שלום עולם",
    "हिन्दी",
    "नमस्ते दुनिया",
    "क्षत्रिय",
    "สวัสดี",
    "ภาษาไทย น้ำ",
    "Tiếng Việt",
    # emoji and symbols
    "🤗",
    "👍",
    "👍🏽",
    "a🤗b",
    "family 👩\u200d👩\u200d👧",
    "👨\u200d👩\u200d👧",
    "🇫🇷",
    "🇫🇷🇩🇪",
    "❤️",
    "€100",
    "©",
    "→ ← ≤ ≥",
    # control characters
    "\x00",
    "\x07",
    "\x1f",
    "a\x00b\x1fc",
    "a\x7fb",
    "\x85",
    "tab\x0bvertical\x0cform",
    # special tokens inside text
    "<mask>",
    "a <mask> b",
    "a<mask>b",
    "a  <mask>  b",
    "hello <mask>",
    "<mask> hello",
    "<s>x</s>",
    "<s> x </s>",
    "<unk>",
    "<pad>",
    "<pad> <unk>",
    "</s> <pad> <unk>",
    "<MASK> is not special",
    # characters outside the vocabulary
    "𠀋",
    "龘",
    "𐀀",
    "𠀋龘",
    "𠀋 龘",
    "a𠀋b",
    "rare 𐀀𐀁𐀂 linear b",
    "龘龘龘",
    # digits and punctuation
    "12345",
    "3.14159",
    "a1b2c3",
    "1234567890 0987654321",
    "2024-06-01T12:34:56Z",
    "!!!",
    "...",
    "?!",
    "--",
    "a-b",
    "Hello, world!",
    "(a) [b] {c} <d>",
    "\"quoted\" 'single'",
    "don't won't can't it's",
    # long runs
    "abcdefghijklmnopqrstuvwxyz" * 11 + "abcdefghijklmn",  # 300 letters
    "=" * 200,
    "a " * 40,
    # mixed text
    "MiXeD CaSe TeXt WiTh CAPITALS and lowercase",
    "The quick brown fox jumps over the lazy dog.",
    # tokenize.ExampleLoad's text, so that its output is checked here.
    "Linear attention reads long documents.",
    "https://example.com/path?query=1&x=y#frag",
    "def f():\n    return 1\n",
    "Der Bäcker verkauft frische Brötchen.",
    "Le garçon mange une pomme à midi.",
    "Мальчик читает книгу.",
    "Το παιδί διαβάζει ένα βιβλίο.",
    "Price: 5 ㎏ for €10, ①②③ steps, ﬁne.",
    "English, Deutsch, français, русский, 中文, 日本語, 한국어, العربية, हिन्दी.",
]


def training_lines():
    """The training text: train.txt, a frozen snapshot of committed English
    prose (testdata/realmodel/calibration.txt and docs/*.md as they were
    when the fixtures were first made), then MULTILINGUAL."""
    lines = []
    with open(os.path.join(HERE, "train.txt"), encoding="utf-8") as f:
        lines.extend(f.read().splitlines())
    lines.extend(MULTILINGUAL.splitlines())
    return [l for l in lines if l.strip()]


def train_spm(lines):
    """A serialized SentencePiece Unigram ModelProto. XLM-R's own model has
    the default layout <unk>=0 <s>=1 </s>=2 (no <pad>), which
    XLMRobertaConverter remaps to fairseq's order."""
    import io

    spm.set_random_generator_seed(SEED)
    spm.set_min_log_level(2)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type="unigram",
        vocab_size=VOCAB_SIZE,
        normalization_rule_name="nmt_nfkc",
        character_coverage=1.0,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentence_length=1 << 16,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2,
    )
    return buf.getvalue()


def convert(model_proto, workdir):
    """The fast tokenizer transformers 5.23 builds for XLM-R from a
    sentencepiece.bpe.model: Precompiled normalizer, WhitespaceSplit +
    Metaspace(prepend_scheme "always") pre-tokenizer, Unigram with unk_id 3,
    "<s> $A </s>" template."""
    import transformers
    from transformers import XLMRobertaTokenizer

    transformers.logging.set_verbosity_error()
    src = os.path.join(workdir, "spm")
    os.makedirs(src)
    with open(os.path.join(src, "sentencepiece.bpe.model"), "wb") as f:
        f.write(model_proto)
    hf = XLMRobertaTokenizer.from_pretrained(
        src,
        mask_token=AddedToken("<mask>", lstrip=True, rstrip=False,
                              normalized=False, special=True),
    )
    tok = Tokenizer.from_str(hf.backend_tokenizer.to_str())
    want = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3,
            "<mask>": VOCAB_SIZE + 1}
    got = {t: tok.token_to_id(t) for t in want}
    if got != want:
        sys.exit("gen_unigram: special token ids %s, want %s" % (got, want))
    return tok


XLMR_ADDED = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3,
               "<mask>": VOCAB_SIZE + 1}


def convert_converter(workdir, reference):
    """The same model through convert_slow_tokenizer.XLMRobertaConverter(
    ...).converted(): Sequence[Precompiled, Strip(right), Replace(Regex
    " {2,}" -> U+2581)] normalizer, Metaspace (prepend_scheme "always", split
    true) pre-tokenizer and decoder, the same fairseq-ordered Unigram and
    "<s> $A </s>" template. The converter's original tokenizer is
    transformers 5.23's XLMRobertaTokenizer on the sentencepiece.bpe.model
    convert() wrote (transformers 5 has no slow XLM-R tokenizer); converted()
    reads from it only vocab_file, add_prefix_space (True; there is no
    `legacy` attribute, so the scheme is "always") and the ids of <s> and
    </s>. converted() makes added tokens only of the SentencePiece control
    pieces, <s> and </s>; <pad>, <unk> and <mask> (lstrip, as in
    xlmr-unigram) are added here with add_special_tokens, which gives them
    their vocabulary ids. The added_tokens must then equal `reference`'s
    (xlmr-unigram's)."""
    import transformers
    from transformers import XLMRobertaTokenizer
    from transformers.convert_slow_tokenizer import XLMRobertaConverter

    transformers.logging.set_verbosity_error()
    hf = XLMRobertaTokenizer.from_pretrained(os.path.join(workdir, "spm"))
    tok = XLMRobertaConverter(hf).converted()
    have = {t["content"] for t in json.loads(tok.to_str())["added_tokens"]}
    missing = []
    for content in sorted(XLMR_ADDED, key=XLMR_ADDED.get):
        if content not in have:
            missing.append(AddedToken(content, lstrip=content == "<mask>",
                                      rstrip=False, normalized=False,
                                      special=True))
    tok.add_special_tokens(missing)
    tok = Tokenizer.from_str(tok.to_str())
    doc = json.loads(tok.to_str())
    want = json.loads(reference.to_str())
    if doc["added_tokens"] != want["added_tokens"]:
        sys.exit("gen_unigram: converter added_tokens %s, want %s"
                 % (doc["added_tokens"], want["added_tokens"]))
    got = {t: tok.token_to_id(t) for t in XLMR_ADDED}
    if got != XLMR_ADDED or tok.get_vocab_size(with_added_tokens=True) != \
            reference.get_vocab_size(with_added_tokens=True):
        sys.exit("gen_unigram: converter special token ids %s, want %s"
                 % (got, XLMR_ADDED))
    norm = [n["type"] for n in doc["normalizer"].get("normalizers", [])]
    if (doc["normalizer"]["type"], norm) != \
            ("Sequence", ["Precompiled", "Strip", "Replace"]):
        sys.exit("gen_unigram: converter normalizer %s" % norm)
    pre = doc["pre_tokenizer"]
    if (pre["type"], pre.get("prepend_scheme"), pre.get("split")) != \
            ("Metaspace", "always", True):
        sys.exit("gen_unigram: converter pre-tokenizer %s" % pre)
    if doc["post_processor"] != want["post_processor"]:
        sys.exit("gen_unigram: converter post-processor differs")
    return tok


def tokenizer_config():
    """tokenizer_config.json in the shape found beside XLM-R-based models on
    the Hub (xlm-roberta-base, bge-m3, multilingual-e5)."""
    def added(content, lstrip=False):
        return {"content": content, "lstrip": lstrip, "normalized": False,
                "rstrip": False, "single_word": False, "special": True}

    return {  # keys in sorted order
        "added_tokens_decoder": {
            "0": added("<s>"),
            "1": added("<pad>"),
            "2": added("</s>"),
            "3": added("<unk>"),
            str(VOCAB_SIZE + 1): added("<mask>", lstrip=True),
        },
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": True,
        "cls_token": "<s>",
        "eos_token": "</s>",
        "mask_token": "<mask>",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "sp_model_kwargs": {},
        "tokenizer_class": "XLMRobertaTokenizer",
        "unk_token": "<unk>",
    }


def save_tokenizer(tok, name, config=None):
    out = os.path.join(HERE, name)
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "tokenizer.json")
    tok.save(path, pretty=True)
    if Tokenizer.from_file(path).to_str() != tok.to_str():
        sys.exit("gen_unigram: %s/tokenizer.json does not round-trip" % name)
    if config is not None:
        with open(os.path.join(out, "tokenizer_config.json"), "w",
                  encoding="utf-8") as f:
            # Top-level keys sorted, added_tokens_decoder in id order, as
            # transformers writes them.
            json.dump(config, f, ensure_ascii=True, indent=2)
            f.write("\n")
    return path


def first_variant(tok):
    """The same tokenizer with Metaspace prepend_scheme "first", made by
    editing the JSON and reloading it."""
    doc = json.loads(tok.to_str())
    n = 0
    for part in (doc["pre_tokenizer"], doc["decoder"]):
        stack = [part]
        while stack:
            p = stack.pop()
            if p.get("type") == "Metaspace":
                if p.get("prepend_scheme") != "always":
                    sys.exit("gen_unigram: Metaspace prepend_scheme %r, want"
                             " 'always'" % p.get("prepend_scheme"))
                p["prepend_scheme"] = "first"
                n += 1
            stack.extend(p.get("pretokenizers", []))
            stack.extend(p.get("decoders", []))
    if n != 2:
        sys.exit("gen_unigram: found %d Metaspace parts, want 2" % n)
    return Tokenizer.from_str(json.dumps(doc, ensure_ascii=False))


def heldout_texts():
    with open(os.path.join(ROOT, "testdata", "realmodel", "heldout.txt"),
              encoding="utf-8") as f:
        raw = f.read()
    texts = [line for line in raw.splitlines() if line.strip()]
    texts.append(raw)
    return texts


def byte_offsets(text, offsets):
    """The Python binding reports offsets in characters (code points); the
    Rust library works in UTF-8 bytes, as Go strings do. The Precompiled
    normalizer aligns every normalized character with whole original
    characters, so the byte form is exact."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def encode_cases(tok, texts):
    out = []
    for text in texts:
        enc = tok.encode(text, add_special_tokens=True)
        out.append({
            "text": text,
            "ids": enc.ids,
            "tokens": enc.tokens,
            "byte_offsets": byte_offsets(text, enc.offsets),
        })
    return out


def check_transformers(name, cases, from_dir):
    """transformers must give the ids tokenizers gave: AutoTokenizer on the
    directory for xlmr-unigram (XLMRobertaTokenizer rebuilds the pipeline
    from the vocabulary and charsmap, so this checks the JSON is in the form
    it expects), PreTrainedTokenizerFast on the file for the variant."""
    import transformers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    transformers.logging.set_verbosity_error()
    path = os.path.join(HERE, name)
    if from_dir:
        hf = AutoTokenizer.from_pretrained(path)
    else:
        hf = PreTrainedTokenizerFast(
            tokenizer_file=os.path.join(path, "tokenizer.json"))
    for case in cases:
        ids = hf(case["text"], add_special_tokens=True)["input_ids"]
        if ids != case["ids"]:
            sys.exit("gen_unigram: %s: transformers gives %s for %r, "
                     "tokenizers %s" % (name, ids, case["text"], case["ids"]))


def compare_sentencepiece(model_proto, cases):
    """How often sentencepiece itself agrees (for information only; the
    fixtures are what `tokenizers` gives). SentencePiece id i is fairseq id
    i+1; its <unk> (0) is 3."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    differ = []
    for case in cases:
        ids = [3 if i == 0 else i + 1 for i in sp.encode(case["text"])]
        if [0] + ids + [2] != case["ids"]:
            differ.append(case["text"])
    return differ


def main():
    lines = training_lines()
    work = tempfile.mkdtemp(prefix="gen_unigram.")
    try:
        proto = train_spm(lines)
        tok = convert(proto, work)
        conv = convert_converter(work, tok)
        variants = (("xlmr-unigram", tok, tokenizer_config(), True),
                    ("xlmr-unigram-first", first_variant(tok), None, False),
                    ("xlmr-unigram-converter", conv, None, False),
                    ("xlmr-unigram-metafirst", first_variant(conv), None,
                     False))
        texts = CASES + heldout_texts()
        doc = {}
        for name, t, config, from_dir in variants:
            save_tokenizer(t, name, config)
            t = Tokenizer.from_file(os.path.join(HERE, name, "tokenizer.json"))
            doc[name] = encode_cases(t, texts)
            check_transformers(name, doc[name], from_dir)
            print("gen_unigram: %s: %d vocab entries (with added tokens), %d"
                  " cases" % (name, t.get_vocab_size(with_added_tokens=True),
                              len(texts)))
        for name in doc:
            differ = compare_sentencepiece(proto, doc[name])
            print("gen_unigram: sentencepiece %s differs from %s on %d of %d"
                  " cases" % (spm.__version__, name, len(differ), len(texts)))
        for name in ("xlmr-unigram-first", "xlmr-unigram-converter",
                     "xlmr-unigram-metafirst"):
            differ = [a["text"] for a, b in zip(doc["xlmr-unigram"], doc[name])
                      if a["ids"] != b["ids"]]
            print("gen_unigram: %s ids differ from xlmr-unigram's on %d of %d"
                  " cases" % (name, len(differ), len(texts)))
    finally:
        shutil.rmtree(work)
    dst = os.path.join(HERE, "unigram_cases.json")
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("gen_unigram: wrote %s (tokenizers %s, sentencepiece %s)"
          % (dst, tokenizers.__version__, spm.__version__))


if __name__ == "__main__":
    main()
