"""Detecting a document's language from its words, for its full-text configuration.

A stop-word count per language: enough to tell apart, on a paragraph or more, the languages
PostgreSQL stems (Danish, Norwegian and Catalan among them; not Basque, Irish, Yiddish or
Estonian, which only frontmatter names) and Polish, Czech, Slovak and Ukrainian, with no model
and no dependency. Greek, Armenian and Tamil are told by their scripts.
Frontmatter ``language`` wins; a text too short or too mixed to tell gets None (the database's
default configuration).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from ..models import DocumentDraft
from ..vocabulary import SCRIPTS, letters

__all__ = ["detect_language", "scripts_of", "with_language"]

_STOP: dict[str, frozenset[str]] = {
    "en": frozenset("the and of to is in that for with on are as this be by from it was we not "
                    "or an at which have has".split()),
    "it": frozenset("il lo la gli le di che è per con non una un del della dei delle nel nella "
                    "sono come anche più al alla ai si".split()),
    "fr": frozenset("le la les des est et une un du dans que pour qui pas sur au aux avec ce "
                    "sont par plus ne".split()),
    "de": frozenset("der die das und ist nicht ein eine mit den dem des zu auf für sich von im "
                    "auch wird sind oder".split()),
    "es": frozenset("el la los las de que y en un una es por con para del se al lo como más "
                    "pero sus está".split()),
    # "a" is in _POOLS: Hungarian's article, Czech's and Slovak's "and".
    "pt": frozenset("o os as de que e em um uma para com não do da dos das no na por mais "
                    "se são é".split()),
    # Words that are also another set's stop words (English "in", "is", "a"; German "die")
    # are left out, so that a language added here takes no document from one that was there.
    "nl": frozenset("de het een en van dat op te zijn voor met niet er aan ook als bij door "
                    "maar om naar wordt worden deze kan hun wij zich".split()),
    # Swedish's forms that Danish or Norwegian write too are in _POOLS.
    "sv": frozenset("och att är för till inte ett jag från vid när också skall".split()),
    # Danish and Norwegian (bokmål): only the forms that neither the other nor Swedish writes
    # (Danish "af", "hvad", "nogle"; Norwegian "å", "hva", "noen"); the rest are in _POOLS.
    # Not "meg", "deg", "seg" (Hungarian's "meg"; "seg fault"), "nå" (Danish and Swedish
    # "reach"), "sådan" (Swedish), "frem", "meget" (bokmål too).
    "da": frozenset("af hvad nogle noget mellem gennem ud bliver blevet været vores uden "
                    "hvornår tilbage gør gøre desuden løbet".split()),
    "no": frozenset("å hva noen noe mellom gjennom opp etter ble blitt mye slik uten vært enn "
                    "tilbake gjør gjøre betyr dessuten dere sånn skjer løpet".split()),
    "fi": frozenset("ja on ei se että hän oli ovat tai kun mutta jos myös sekä joka mikä kuin "
                    "tämä nämä ole voi sitä".split()),
    "tr": frozenset("ve bir bu için ile olarak çok daha gibi ama veya kadar sonra olan her "
                    "değil ancak şu".split()),
    "hu": frozenset("az és hogy nem egy meg van ez csak már mint volt vagy ha kell még "
                    "azt ami amely".split()),
    # PostgreSQL has no Polish stemmer: Polish documents are indexed by their words' prefixes
    # too (ranking.text.PREFIX_LANGUAGES). Not "i", "na", "do", "o" (English, Portuguese).
    "pl": frozenset("się nie że jest jak dla przez są oraz który która które także lub ale "
                    "czy już może być tym tej ten przy od po jego jej tak tylko gdy jeśli w z".split()),
    # Czech (no PostgreSQL stemmer either): not "a", "na", "do", "o", "se", "to" (Portuguese,
    # English) nor "z", "ale", "tak", "po", "od" (Polish), nor "v" ("v2" is a version).
    "cs": frozenset("je že pro jako jsou jsme jsem který která které také nebo když jen už "
                    "při podle jeho není bude mezi pokud tento tato toto této byl byla "
                    "bylo".split()),
    "ru": frozenset("и в во не на что с со по как к из у за от для о об же так то это все он "
                    "она они мы их но а до или его её при через между после если уже".split()),
    # Ukrainian and Slovak, which PostgreSQL cannot stem either: only the forms that no other
    # list holds. Russian writes "в", "не", "на", "до", "при", "через"; Czech "je", "že", "už",
    # "jeho", "bude", "tento"; Polish "nie", "jej"; Swedish "som"; German "ich".
    "uk": frozenset("і й та що це як або від який яка які яке також якщо вже її їх він вона "
                    "вони але коли щоб тому після між є цей ця ці може буде було був була "
                    "були".split()),
    "sk": frozenset("sa sú ako pre pri ktorý ktorá ktoré ktorých alebo tiež keď len podľa aj "
                    "môže bol bola bolo boli sme medzi táto tejto iba".split()),
    # Languages PostgreSQL stems, each by forms no other list holds: not Spanish's and
    # Portuguese's "este" for Romanian, nor Danish's "din"; not Italian's "di", nor "ke", for
    # Indonesian; not "su", "per", "tai" for Lithuanian; not Hungarian's "és", Italian's "per"
    # or German's "als", nor "però", which Italian writes too, for Catalan (the words it shares
    # with Spanish are in _CLOSE).
    # Romanian writes "de", "la", "se", "un", "o" and "e" as Spanish and Portuguese do: its own
    # forms must outnumber them ("care", "mai", "nu", "pe" are no other list's).
    "ro": frozenset("și în să că cu pe nu care mai pentru sunt sau fost dacă această acest "
                    "către după fiecare trebuie când unde prin iar doar între până fără astfel "
                    "acum toate".split()),
    "ca": frozenset("amb els dels pel pels aquest aquesta aquests aquestes també són "
                    "perquè seva seves molt quan mitjançant només després mateix mateixa això "
                    "està".split()),
    "id": frozenset("yang dan ini itu dengan untuk tidak dari dalam akan pada adalah juga "
                    "karena bisa ada oleh atau sudah telah jika saat harus".split()),
    "lt": frozenset("ir kad yra iš į kaip bet arba buvo jis ji jie nuo apie kuris kuri kai "
                    "dėl tik".split()),
    # Arabic's, not Persian's or Urdu's (their own letters differ: ک, ی, ہ); not "ما" ("we" in
    # Persian).
    "ar": frozenset("في من على إلى الى عن مع هذا هذه التي الذي الذين أن إن كان كانت لا هو هي "
                    "بين عند كل أو ثم قد لم لن حتى بعد قبل ذلك تلك".split()),
    # Hindi's and Nepali's, not the words both write ("को", "कि", "पर", "जो") nor Marathi's
    # ("की", "होती").
    "hi": frozenset("है हैं के में और से नहीं यह भी लिए था थे किया करने होता गया जाता".split()),
    "ne": frozenset("छ छन् र मा हो पनि यो गर्न लागि भएको गरेको थियो भने हुन्छ छैन".split()),
    # Serbian's Cyrillic forms that neither Russian, Ukrainian nor Bulgarian writes.
    "sr": frozenset("је су од као али када није ово ова ове ови овај ће кроз према уколико "
                    "треба".split()),
}
# Letters, and the vowel signs of the scripts of India (combining marks, which are not letters
# to ``re``: "है" would be read as "ह"), but not their full stops (। and ॥).
_WORD = re.compile(r"(?:[^\W\d_]|[\u0900-\u0963\u0966-\u0dff])+")
# Letters that only one of the languages above writes: a word that holds one counts as one of
# that language's stop words. Czech shares its commonest short words with Portuguese ("a",
# "o", "na", "do", "se"): by stop words alone, Portuguese won 2 of 28 Czech documents and
# came within 1.5 times of Czech on 21 (decision 0022).
# Ukrainian and Russian share most of their alphabet and no stop word: і, ї, є and ґ are only
# Ukrainian, ы, э, ъ and ё only Russian. ľ, ĺ and ŕ are only Slovak (its ä and ô are German's and
# French's too), ő and ű only Hungarian.
# Romanian's ș, ț and ă (ţ with a cedilla too, not ş: Turkish's), Lithuanian's ė, į and ų, and
# Serbian's Cyrillic ђ, ј, љ, њ, ћ and џ are theirs alone of the languages above; Vietnamese,
# which writes ă too, has letters of its own (it has no configuration: its documents keep the
# default's). A word of three letters of the Greek, Armenian or Tamil script is its
# language's (a lone α or μ stands in English formulas).
_OWN_LETTERS = {"cs": re.compile("[ěřů]"), "pl": re.compile("[łąęśźż]"),
                "uk": re.compile("[іїєґ]"), "ru": re.compile("[ыэъё]"), "sk": re.compile("[ľĺŕ]"),
                "hu": re.compile("[őű]"), "ro": re.compile("[șțţă]"), "lt": re.compile("[ėįų]"),
                "sr": re.compile("[ђјљњћџ]"), "el": re.compile("[α-ωάέήίόύώϊϋΐΰ]{3}"),
                "hy": re.compile("[ա-ֆ]{3}"), "ta": re.compile("[\u0b80-\u0bff]{3}"),
                "vi": re.compile("[ơưđạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ]")}
# Letters that, of the languages above, Czech and Slovak alone write: in a text that also holds
# Czech's or Slovak's own letters, a word that holds one counts for whichever of the two the
# rest favours. Slovak's commonest words ("a", "na", "do", "o") are Portuguese stop words, and
# by them alone Portuguese won or tied 19 of 28 Slovak documents. Croatian, Slovenian and
# Lithuanian write these letters too, and Czech names stand in English text: without ě, ř, ů,
# ľ, ĺ or ŕ they count for nothing.
_CZECH_OR_SLOVAK = re.compile("[čšžýňťď]")
# Letters that, of the languages above, Danish and Norwegian alone write: a word that holds one
# is a form of its own for whichever of the two the rest favours, Danish on a tie (its stemmer
# also takes Norwegian's definite plurals, "fakturaene" to "faktura"; Norwegian's leaves Danish's
# "systemerne" as "systemern").
_DANISH_OR_NORWEGIAN = re.compile("[æø]")
# Words that close languages write alike: each counts for whichever of them the rest of the text
# favours (the first on a tie), and only when that one has a form of its own there (a word of
# its list; for Danish and Norwegian, æ or ø too), so that one "men" or "a" in English text
# counts for nothing. Danish and Norwegian share most of their commonest words, and both share
# their most frequent ones with Swedish: counted for Swedish, they made every Danish and
# Norwegian document Swedish. Portuguese's "a" is Hungarian's article and Czech's and Slovak's
# "and": counted for Portuguese alone, it made Hungarian text Portuguese. A pooled word that is
# also another list's ("den" German, "om" Dutch) counts there as before.
_POOLS: tuple[tuple[tuple[str, ...], frozenset[str]], ...] = (
    (("da", "no"), frozenset("og ikke også være hvis kun når hvordan hvorfor hvilke hvilken "
                             "denne dette disse fordi mange til jeg skal vil fra".split())),
    (("sv", "no"), frozenset(["av"])),
    (("sv", "da"), frozenset(["efter"])),
    (("sv", "da", "no"), frozenset("det som på med den har om men var eller".split())),
    (("pt", "hu", "cs", "sk"), frozenset(["a"])),
)
# A language and a close one that writes its commonest words too: those words (in the first's
# list) count for the close one instead when its own forms outnumber the first's other words.
# Catalan writes Spanish's "de", "la", "el", "que", "en", which outnumbered its own forms: its
# documents were read as Spanish, or as none when Portuguese's "de", "que", "no", "com" came
# close. In Spanish and Portuguese text Catalan's forms are rare, and they count as before.
_CLOSE: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("es", "ca", frozenset("el la de que en un una es del al".split())),
    ("pt", "ca", frozenset("de que no com em se".split())),
)
# At least this many stop words, and the winner this many times the runner-up: short or
# mixed text stays undetected.
_MIN_HITS = 5
_MIN_LEAD = 1.5


#: The scripts of the languages that no list here knows the words of (Chinese, Japanese and
#: Korean): a text mostly in them has no language, whatever its Latin words say.
_UNSPACED = ("han", "kana", "hangul")


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code of ``text``'s language, or None when it cannot tell.

    >>> detect_language("Le notifiche push passano da Firebase e il marketing crea le "
    ...                 "campagne nel pannello interno, con gli stessi segmenti del CRM.")
    'it'
    >>> detect_language("The service issues tokens and the keys rotate daily for all of the "
    ...                 "clients that are on the platform.")
    'en'
    >>> detect_language("События передаются через Kafka, и их можно прочитать с любого "
    ...                 "смещения, если потребитель не успел их обработать за день.")
    'ru'
    >>> detect_language("De gemeente registreert een nieuw adres in de BAG en de wijziging "
    ...                 "staat daarna ook in het zaaksysteem, maar niet voor het weekend.")
    'nl'
    >>> detect_language("Odczyty wodomierzy trafiają do bilingu przez bramy LoRaWAN, które "
    ...                 "są w każdej strefie; jeśli brama nie odpowiada, dyżurny ją restartuje.")
    'pl'
    >>> detect_language("Recepty se odesílají do úložiště SÚKL a lékař dostane chybu, pokud "
    ...                 "je pacient v registru veden pod jiným číslem pojištěnce.")
    'cs'
    >>> detect_language("Посилки з відділень їдуть до сортувального центру щоночі, і якщо "
    ...                 "сканер не бачить штрихкод, оператор вводить його вручну.")
    'uk'
    >>> detect_language("Čitatelia vracajú knihy do automatu, ktorý je pri vchode. Ak preukaz "
    ...                 "nefunguje, pomôže im knihovník podľa postupu, ktorý sa nachádza v "
    ...                 "príručke, alebo sa obrátia na helpdesk.")
    'sk'
    >>> detect_language("Målerne sender aflæsningerne til systemet hver nat, og hvis en måler "
    ...                 "ikke svarer, bliver den vist på listen over fejl i portalen.")
    'da'
    >>> detect_language("Målerne sender avlesningene til systemet hver natt, og hvis en måler "
    ...                 "ikke svarer, blir den vist på lista over feil etter kl. 06.")
    'no'
    >>> detect_language("Serverne skal være oppe hele døgnet, og det er ikke lov å stoppe dem "
    ...                 "før vaktlederen har sagt ja til det.")  # "å", and the words both write
    'no'
    >>> detect_language("Mätarna skickar avläsningarna till systemet varje natt, och om en "
    ...                 "mätare inte svarar visas den på listan över fel i portalen.")
    'sv'
    >>> detect_language("A kalauzok a kézi terminálon ellenőrzik a jegyeket, és ha a terminál "
    ...                 "nem működik, a papír alapú listát használják.")
    'hu'
    >>> detect_language("Sustav za naplatu šalje račune svaki dan, a što je važno, računi su "
    ...                 "u PDF-u i šalju se e-poštom kupcima čim je narudžba plaćena.") is None
    True
    >>> detect_language("Els servidors envien les lectures al sistema cada nit, i si un comptador "
    ...                 "no respon, l'operador de guàrdia revisa el registre amb el procediment.")
    'ca'
    >>> detect_language("OK") is None
    True
    >>> detect_language("基幹システムを SAP S/4HANA Cloud へ移行する。業務を標準機能に合わせる Fit to "
    ...                 "Standard を原則とし、アドオンは210本に減らす。") is None  # not English
    True
    """
    if 2 * letters(text, _UNSPACED) >= letters(text) > 0:
        return None  # Chinese, Japanese or Korean, with a few words of another language
    counts = _counts(text)
    if not counts:
        return None
    (best, n), *rest = counts.most_common(2) + [("", 0)]
    second = rest[0][1]
    return best if n >= _MIN_HITS and n >= _MIN_LEAD * second else None


def _counts(text: str) -> Counter[str]:
    """Each language's stop words and letters of its own in ``text``, with the words that close
    languages share counted for the one the rest favours (_POOLS, _CLOSE)."""
    counts: Counter[str] = Counter()
    own_forms: Counter[str] = Counter()  # the words of each language's own list
    pooled: Counter[int] = Counter()  # the words of each of _POOLS
    shared: Counter[int] = Counter()  # the words of each of _CLOSE
    czech_or_slovak, czech_or_slovak_own, danish_or_norwegian = 0, 0, 0  # words with the letters
    for word in _WORD.findall(text.lower()):
        for lang, stop in _STOP.items():
            if word in stop:
                own_forms[lang] += 1
        for lang, own in _OWN_LETTERS.items():
            if own.search(word):
                counts[lang] += 1
                czech_or_slovak_own += lang in ("cs", "sk")
        czech_or_slovak += bool(_CZECH_OR_SLOVAK.search(word))
        danish_or_norwegian += bool(_DANISH_OR_NORWEGIAN.search(word))
        pooled.update(i for i, (_, words) in enumerate(_POOLS) if word in words)
        shared.update(i for i, (*_, words) in enumerate(_CLOSE) if word in words)
    counts.update(own_forms)
    if czech_or_slovak and czech_or_slovak_own:
        counts["sk" if counts["sk"] > counts["cs"] else "cs"] += czech_or_slovak
    if danish_or_norwegian:
        lang = "no" if counts["no"] > counts["da"] else "da"
        counts[lang] += danish_or_norwegian
        own_forms[lang] += danish_or_norwegian
    for i, (langs, _) in enumerate(_POOLS):
        favoured = max(langs, key=counts.__getitem__)
        if pooled[i] and own_forms[favoured]:
            counts[favoured] += pooled[i]
    for i, (first, close, _) in enumerate(_CLOSE):
        if counts[close] > counts[first] - shared[i]:
            counts[first] -= shared[i]
            counts[close] += shared[i]
    return counts


# Enough text to tell the language by its stop words.
_DETECT_CHUNKS = 5


def with_language(draft: DocumentDraft) -> DocumentDraft:
    """``draft`` with a language: its frontmatter's (or metadata's), else the one its first
    chunks' words show, else none (the database's default full-text configuration)."""
    if draft.language is not None:
        return draft
    detected = detect_language(" ".join(c.text for c in draft.chunks[:_DETECT_CHUNKS]))
    return draft if detected is None else replace(draft, language=detected)


# The scripts that calibration.SCRIPT_PROBES has questions in.
_SCRIPTS = [name for name in SCRIPTS if name != "latin"]
#: A script counts when it holds at least this share of the letters.
SCRIPT_SHARE = 0.1


def scripts_of(texts: Iterable[str]) -> frozenset[str]:
    """The non-Latin scripts (keys of ``ranking.calibration.SCRIPT_PROBES``) that hold at
    least :data:`SCRIPT_SHARE` of the letters of ``texts``.

    >>> sorted(scripts_of(["缓存层使用 Redis", "We cache sessions in Redis."]))
    ['han']
    >>> sorted(scripts_of(["半熟卵は何分ゆでればいいですか"])), scripts_of(["Plain English."])
    (['han', 'kana'], frozenset())
    """
    total, counts = 0, Counter[str]()
    for text in texts:
        total += letters(text)
        for name in _SCRIPTS:
            counts[name] += letters(text, [name])
    return frozenset(n for n, c in counts.items() if total and c >= SCRIPT_SHARE * total)

