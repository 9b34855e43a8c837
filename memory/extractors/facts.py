"""First-person facts without an LLM: what a user says about themselves and their people.

``facts_extract`` turns one user turn's text into facts (subject, predicate, value) in the
vocabulary of the labelled set (``memory/calibration/facts.json``, whose header defines the
predicates and how subjects and values are written). Rules were chosen on the set's dev half
and on a second, independently written dev set (``facts_dev2.json``, less a held-out quarter);
the figures, test half included, are in bench/RESULTS.md (``python -m bench.facts``).

Why rules and not a parser: spaCy is on the package index here but none of its English models
is (``pip download en-core-web-sm`` finds nothing), nor are NLTK's data packages, so no
dependency parse or entity model installs offline. The rules therefore work the way a parse
would be used, in four steps:

1. The turn is cut into sentences, quoted text is removed, a sentence is read only up to a
   reporting verb ("my wife Jo thinks I …" names Jo, and nothing after), and a sentence that
   supposes or cancels ("if …", "let's say …", "… but we cancelled") yields nothing. A sentence
   written as a form's field ("stack: TypeScript, React 18", "hometown: Tromsø") is one fact
   per item of its list.
2. Each sentence is cut into clauses (at commas and at "and", "so", "because", "which", …);
   a question, a wish, a hedge or a relative clause yields nothing.
3. A clause's subject is read at its start: "I"/"we" (the user), "my sister Ana", "he"/"her"
   (the relation last named), or none (a clause that goes on from the one before, "…, work at a
   bookshop"). Anything else (a stranger, a document, a character) yields nothing.
4. The verb phrase right after the subject is matched against ``_RULES``, a table of patterns
   each with its predicate and value group. Because a rule must match at the verb, a negation
   or a modal between subject and verb ("I don't have any pets", "I'll learn Spanish") makes
   no fact without a separate guard. A clause that is only "X" after "… and" continues the
   list of the clause before ("allergic to peanuts and tree nuts").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# --- Word lists ------------------------------------------------------------------------------

_PARTNERS = r"wife|husband|partner|girlfriend|boyfriend|fianc[eé]e?|spouse"
_RELATIVES = (
    r"mom|mum|mother|dad|father|parents|brother|sister|son|daughter|kids|children|"
    r"grandma|grandmother|grandpa|grandfather|granddaughter|grandson|aunt|uncle|cousin|niece|"
    r"nephew|twin|twins|stepson|stepdaughter|stepmom|stepmum|stepdad|baby|in-laws|"
    r"mother-in-law|father-in-law|sister-in-law|brother-in-law|little brother|little sister|"
    r"big brother|big sister|older brother|older sister|younger brother|younger sister"
)
# People the user names as theirs, whose facts are labelled but who are not family.
_OTHERS = r"best friend|friend|roommate|flatmate|housemate|colleague|coworker|co-worker|boss"
_RELATIONS = rf"(?:{_PARTNERS}|{_RELATIVES}|{_OTHERS})"
_FAMILY_WORD = re.compile(rf"^(?:{_RELATIVES})$", re.IGNORECASE)
_PARTNER_WORD = re.compile(rf"^(?:{_PARTNERS})$", re.IGNORECASE)

_PETS = (
    r"dog|cat|puppy|kitten|tortoise|turtle|rabbit|bunny|hamster|guinea pig|parrot|budgie|"
    r"goldfish|fish|snake|lizard|gecko|horse|pony|ferret|chinchilla|rat|mouse|chickens?|"
    r"cockatiel|canary|iguana|hedgehog|collie|border collie|labrador|lab|retriever|terrier|"
    r"spaniel|poodle|beagle|dachshund|husky|corgi|pug|greyhound|whippet|shepherd|bulldog|"
    r"tabby|bearded dragon|axolotl|cockatoo|tarantula|pig|goat|alpaca|duck|ducks"
)

_JOBS = (
    r"engineer|developer|dev|designer|teacher|nurse|doctor|dentist|accountant|lawyer|"
    r"scientist|analyst|manager|lead|consultant|architect|programmer|researcher|professor|"
    r"lecturer|writer|journalist|editor|chef|cook|baker|barista|waiter|waitress|pharmacist|"
    r"vet|veterinarian|paramedic|firefighter|officer|electrician|plumber|carpenter|mechanic|"
    r"driver|pilot|artist|photographer|musician|founder|co-?founder|ceo|cto|cfo|intern|"
    r"freelancer|contractor|administrator|sysadmin|technician|therapist|psychologist|"
    r"librarian|marketer|recruiter|secretary|cashier|clerk|translator|tutor|coach|trainer|"
    r"farmer|builder|surgeon|physician|midwife|carer|caregiver|sre|tester|maintainer|"
    r"specialist|coordinator|director|banker|economist|biologist|chemist|physicist|"
    r"mathematician|statistician|illustrator|animator|producer|actor|actress|dancer|"
    r"social worker|paralegal|receptionist|hairdresser|electrician|welder|pm|qa|devops|"
    r"product owner|scrum master|entrepreneur|student"
)

_NATIONALITIES = (
    r"American|Canadian|Mexican|Brazilian|Argentinian|Argentine|Chilean|Colombian|Peruvian|"
    r"Venezuelan|Cuban|British|English|Scottish|Welsh|Irish|French|German|Dutch|Belgian|Swiss|"
    r"Austrian|Italian|Spanish|Portuguese|Greek|Turkish|Polish|Czech|Slovak|Hungarian|"
    r"Romanian|Bulgarian|Serbian|Croatian|Bosnian|Slovenian|Ukrainian|Russian|Lithuanian|"
    r"Latvian|Estonian|Finnish|Swedish|Norwegian|Danish|Icelandic|Chinese|Japanese|Korean|"
    r"Vietnamese|Thai|Filipino|Filipina|Indonesian|Malaysian|Singaporean|Indian|Pakistani|"
    r"Bangladeshi|Sri Lankan|Nepali|Nepalese|Afghan|Iranian|Persian|Iraqi|Syrian|Lebanese|"
    r"Jordanian|Israeli|Palestinian|Egyptian|Moroccan|Algerian|Tunisian|Nigerian|Ghanaian|"
    r"Kenyan|Ethiopian|Somali|Ugandan|Tanzanian|South African|Zimbabwean|Australian|Kiwi|"
    r"New Zealander|Saudi|Emirati|Kurdish|Armenian|Georgian|Kazakh|Uzbek|Mongolian|"
    r"Taiwanese|Jamaican|Haitian|Dominican|Puerto Rican|Ecuadorian|Bolivian|Uruguayan|"
    r"Paraguayan|Scandinavian|Latino|Latina|Cypriot|Maltese|Albanian|Macedonian|Senegalese|"
    r"Cameroonian|Congolese|Rwandan|Sudanese|Yemeni|Omani|Qatari|Kuwaiti|Bahraini"
)

_LANGUAGES = (
    r"English|Spanish|French|German|Italian|Portuguese|Dutch|Russian|Polish|Ukrainian|Czech|"
    r"Greek|Turkish|Arabic|Hebrew|Persian|Farsi|Hindi|Urdu|Bengali|Bangla|Punjabi|Tamil|"
    r"Telugu|Marathi|Gujarati|Chinese|Mandarin|Cantonese|Japanese|Korean|Vietnamese|Thai|"
    r"Indonesian|Malay|Tagalog|Filipino|Swahili|Yoruba|Igbo|Hausa|Amharic|Zulu|Xhosa|"
    r"Afrikaans|Swedish|Norwegian|Danish|Finnish|Icelandic|Hungarian|Romanian|Bulgarian|"
    r"Serbian|Croatian|Bosnian|Slovak|Slovenian|Lithuanian|Latvian|Estonian|Irish|Welsh|"
    r"Gaelic|Catalan|Basque|Galician|Latin|Esperanto|ASL|BSL|sign language|Portugese|Somali|"
    r"Kurdish|Armenian|Georgian|Albanian|Nepali|Sinhala|Khmer|Lao|Burmese|Mongolian|Pashto|Dari"
)

_CONDITIONS = (
    r"(?:type [12] )?diabetes|asthma|adhd|add|rsi|arthritis|migraines?|epilepsy|coeliac|"
    r"celiac(?: disease)?|ibs|crohn'?s(?: disease)?|depression|anxiety|ptsd|ocd|autism|"
    r"tinnitus|eczema|psoriasis|lupus|ms|multiple sclerosis|high blood pressure|hypertension|"
    r"a heart condition|heart disease|sleep apnea|sleep apnoea|insomnia|fibromyalgia|"
    r"chronic [\w -]+|a bad back|bad knees|a bad knee|long covid|dyslexia|dyspraxia|"
    r"hypothyroidism|endometriosis|pcos|scoliosis|glaucoma|hearing loss|tourette'?s|"
    r"bipolar(?: disorder)?|an eating disorder|colou?r ?blindness|gout|anemia|anaemia"
)
_CONDITION_ADJECTIVES = (
    r"deaf in (?:my|one|both) (?:left |right )?ears?|"
    r"blind in (?:my|one|both) (?:left |right )?eyes?|"
    r"dyslexic|dyspraxic|autistic|diabetic|asthmatic|epileptic|deaf|blind|colou?r ?blind|"
    r"hard of hearing(?: in (?:my|one|both) (?:left |right )?ears?)?|partially sighted|"
    r"lactose intolerant|gluten intolerant|sensitive to \w+|intolerant to \w+|neurodivergent|"
    r"adhd|bipolar|immunocompromised|on the spectrum|visually impaired|hearing impaired|"
    r"in a wheelchair|a wheelchair user|pre-?diabetic|anemic|anaemic"
)
_DIETS = (
    r"vegetarian|vegan|pescatarian|pescetarian|halal|kosher|keto|paleo|gluten[- ]free|"
    r"dairy[- ]free|lactose[- ]free|plant[- ]based|low[- ]carb|sugar[- ]free|teetotal|"
    r"a vegetarian|a vegan|a pescatarian|a teetotaller|sober|carnivore|whole30|intermittent fasting"
)

_MONTHS = (
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_DAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_NUMBERS = r"one|two|three|four|five|six|seven|eight|nine|ten|a couple of|a few|several|twin|\d+"

# A time a plan happens at, or the time a fact was said of ("last year", "in 2019").
_WHEN = (
    rf"(?:(?:last|next|this|every|each|coming) (?:week|weekend|month|year|quarter|sprint|"
    rf"spring|summer|autumn|fall|winter|term|semester|morning|evening|night|day|"
    rf"(?:{_DAYS})s?|{_MONTHS})|"
    rf"in (?:the )?(?:spring|summer|autumn|fall|winter|new year)|in (?:early |late |mid-?)?"
    rf"(?:{_MONTHS})\b|in q[1-4]|in (?:19|20)\d\d|"
    rf"on (?:the )?(?:(?:{_DAYS})s?|\d{{1,2}}(?:st|nd|rd|th)"
    rf"(?: of (?:{_MONTHS}))?)|(?:tomorrow|tonight|soon|later this (?:week|month|year))|"
    rf"in (?:a|an|one|two|three|four|five|six|\d+|a few|a couple of) "
    rf"(?:days?|weeks?|months?|years?)|after (?:the )?(?:summer|holidays|christmas|new year)|"
    rf"(?:{_NUMBERS}) (?:days?|weeks?|months?|years?) (?:ago|from now))"
)

# Uppercase first letter, whatever the rest, inside case-insensitive patterns.
_NAME = r"(?-i:[A-ZÀ-ÖØ-Þ][^\W\d_]+(?:[-'][^\W\d_]+)?)"
_NOT_NAMES = frozenset(
    [
        "i",
        "im",
        "i'm",
        "the",
        "a",
        "an",
        "and",
        "but",
        "so",
        "my",
        "our",
        "we",
        "he",
        "she",
        "it",
        "they",
        "this",
        "that",
        "here",
        "there",
        "yes",
        "no",
        "ok",
        "okay",
        "sorry",
        "fine",
        "good",
        "great",
        "well",
        "just",
        "not",
        "also",
        "still",
        "really",
        "very",
        "going",
        "from",
        "in",
        "at",
        "on",
        "with",
        "for",
        "to",
        "of",
        "fyi",
        "btw",
        "lol",
        "haha",
        "thanks",
        "thank",
        "hello",
        "hi",
        "hey",
        "mr",
        "mrs",
        "ms",
        "dr",
    ]
)

# --- Text preparation ------------------------------------------------------------------------

# Curly quotes and apostrophes, and backticks, read as the plain ones.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'", "\u201c": '"', "\u201d": '"'})
_CONTRACTIONS = re.compile(
    r"\b(i|we|you|he|she|it|they|that|name|birthday|who|there|here|what)'(m|re|s|ve|d|ll)\b",
    re.IGNORECASE,
)
_EXPANDED = {"m": "am", "re": "are", "s": "is", "ve": "have", "d": "would", "ll": "will"}
_SLANG = (
    (re.compile(r"\bim\b(?=\s)", re.IGNORECASE), "i am"),
    (re.compile(r"\bive\b(?=\s)", re.IGNORECASE), "i have"),
    (re.compile(r"\bdont\b", re.IGNORECASE), "don't"),
    (re.compile(r"\bcant\b", re.IGNORECASE), "can't"),
)
# Quoted text is someone else's words ("the ticket says: '…'"), whatever it holds.
_QUOTED = re.compile(r"\"[^\"]*\"|(?<![\w])'[^']*'(?![\w])|(?<![\w])'[^']*$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*|(?<=[.!?])(?=[A-Z])")


def _expand(text: str) -> str:
    text = text.translate(_APOSTROPHES)
    for pattern, replacement in _SLANG:
        text = pattern.sub(replacement, text)
    return _CONTRACTIONS.sub(
        lambda found: f"{found.group(1)} {_EXPANDED[found.group(2).lower()]}", text
    )


# --- Guards ----------------------------------------------------------------------------------

# What someone says or thinks is theirs: a sentence is read up to its reporting verb ("my wife
# Jo thinks I …" still names Jo; "my horoscope says I …" states nothing).
_REPORTED = re.compile(
    r"\b(?:says|said|saying|tells me|told me|thinks|think|thought|reckons|claims|claimed)\b.*$",
    re.IGNORECASE,
)
# A sentence that supposes, pretends, reports or undoes what it says states nothing.
_SENTENCE_GUARD = re.compile(
    r"^\W*(?:if|suppose|supposing|imagine|let us say|let's say|say|what if|assume|assuming|"
    r"pretend|in another life|when i was (?:a kid|little|young|younger|a child|a teenager)|"
    r"as a kid|back in the day)\b|"
    r"\b(?:according to|apparently|heard that|horoscope|cancell?ed|called it off|fell through|"
    r"in the end|didn't happen|character|in the game|in the story|in the novel|"
    r"kidding|joking|jk|sarcasm|/s|translate|translation|yeah,? i (?:just |totally )?love|"
    r"totally love)\b|"
    # Shouted love or hate is sarcasm ("I just LOVE Mondays").
    r"\b(?-i:LOVE|LOVES|ADORE|ENJOY)\b",
    re.IGNORECASE,
)
# A clause that asks, wishes, hedges or depends on something states nothing.
_CLAUSE_GUARD = re.compile(
    r"\?\W*$|^\W*(?:do|does|did|can|could|would|will|is|are|was|were|what|when|where|why|"
    r"how|which|who|whom|whose|should|shall|have you|has|remind me|any|anyone|"
    r"if|unless|whether|that|so that|in case)\b|"
    r"(?<!in )\bmay\b|\b(?:could|might|maybe|perhaps|probably|possibly|should|wish|hope|"
    r"hoping|someday|"
    r"one day|wanna|want to|wants to|wanted to|supposed to|trying to|try to|might|whether|"
    r"if|unless|not sure|don't know|no idea|guess|considering|thinking about|thinking of|"
    r"tempted|dream|dreaming|pretend)\b|\bwould(?! rather)\b",
    re.IGNORECASE,
)
# Words after which a clause is the same sentence's next one.
_CLAUSE_BREAK = re.compile(
    r"\s*[,;:()]\s*|\s+[-\u2013\u2014]+\s+|\s*!+\s*|"
    r"(?<!\ba)\s+(?=(?:so|because|but|which|who|whose|since|though|although|while|whereas|cause|cuz|"
    r"when|if|unless|until|where|plus|then|except|tho|which is|that is|that's|as)\b)|"
    r"\s+(?:and|or|&)\s+"
)
# Clauses cut at "and"/"or" (not at a comma) may continue a list: "peanuts and tree nuts".
_LIST_JOIN = re.compile(r"\s+(?:and|or|&)\s+")


# --- Subjects --------------------------------------------------------------------------------

_LEAD = re.compile(
    r"^(?:(?:and|but|so|also|oh|well|ok|okay|yeah|yes|yep|hey|hi|hello|btw|fyi|honestly|"
    r"actually|anyway|anyways|plus|then|now|ugh|lol|haha|tbh|heads up|for context|for the record|"
    r"keep in mind|just so you know|fun fact|by the way|as you know|currently|nowadays|"
    r"these days|at work|at home|since (?:last|this) \w+|since v?\d[\w.]*|"
    r"for (?:about |over )?(?:\w+) years|"
    r"(?:last|this) \w+|in \d{4}|nah|wow|omg|um|uh|alright|right|sure|true)\b[\s!.,]*)+",
    re.IGNORECASE,
)
_USER = re.compile(
    r"^(?:i|we|me|myself|me and my (?:\w+ )?\w+|my (?:\w+ )?\w+ and i)\b(?!')", re.IGNORECASE
)
# What a team's stack is made of: "our main DB is MySQL 8".
_STACK = (
    r"(?:main |primary |whole |only )?(?:db|database|stack|backend|back end|frontend|front end|"
    r"language|editor|ide|os|cloud|ci|infra|infrastructure|mobile app|app|api|server|"
    r"framework|orm|monorepo|deploy target|hosting)"
)
_USER_THINGS = (
    r"name|names|birthday|birth ?day|favou?rite \w+|hobby|hobbies|job|first language|"
    r"native language|mother tongue|diet|allergy|allergies|pronouns|age|home|hometown"
)
_MY_THING = re.compile(
    rf"^(?:it is |it will be )?(?:(?:my|our) (?=(?:{_USER_THINGS}|{_STACK})\b)"
    r"|(?:the )?(?=name is\b))",
    re.IGNORECASE,
)
_MY_RELATION = re.compile(
    rf"^(?:my|our) (?P<rel>{_RELATIONS})\b(?!'s \w+'s)(?:,? (?P<name>{_NAME}),?)?(?P<poss>'s?)?",
    re.IGNORECASE,
)
_PRONOUN = re.compile(r"^(?:he|she|his|her|they|their)\b(?!')", re.IGNORECASE)
_BARE_START = re.compile(
    r"^(?:(?:just |recently |finally |also |still |only |mostly )*"
    r"(?:\w+ed|been|grew|born|living|got|left|quit|bought|gave|went|took|began|started|"
    r"\w+ing|moved|switched|no longer|run|work|live|call me|ex-\w+|"
    # "keto for 2 years now", "lactose intolerant, so oat milk pls": the speaker's own.
    rf"(?:strictly )?(?:{_DIETS})|{_CONDITION_ADJECTIVES}))\b",
    re.IGNORECASE,
)
# "Kofi here.", "Ingrid Solberg here, 34": the speaker names themself.
_NAME_HERE = re.compile(rf"^(?P<v>{_NAME}(?: {_NAME})?) here$")
# The words between a subject and its verb that change nothing.
_ADVERBS = re.compile(
    r"^(?:(?:just|really|also|still|mostly|actually|currently|now|finally|"
    r"recently|totally|absolutely|definitely|basically|literally|both|all|kinda|genuinely|"
    r"truly|honestly|seriously|officially|mainly|primarily|generally|normally|typically|"
    r"personally|pretty much|kind of|sort of|have been|has been|been|do|does|strictly|"
    r"(?:have|has)(?=\s+(?:moved|relocated|switched|migrated|quit|stopped|dropped|replaced|"
    r"swapped|always|never|just|finally|recently|worked|had)\b))\s+)*",
    re.IGNORECASE,
)
# Base-form verbs opening a subjectless clause are an instruction ("write the raw queries").
_IMPERATIVES = re.compile(
    r"^(?:write|use|add|run|convert|explain|keep|rename|make|let|tell|send|show|fix|check|try|"
    r"give|help|remind|please|pls|put|set|change|remove|delete|update|create|generate|build|"
    r"don't|do not|never|ship|go|see|look|note|call|ask|stop|start|move|switch)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Fact:
    """One fact a user's turn states: ``subject`` is ``"user"`` or one of the user's people
    (``"Maya (daughter)"``), ``sentence`` the words it was read from."""

    subject: str
    predicate: str
    value: str
    sentence: str


@dataclass(frozen=True)
class _Relation:
    word: str
    name: str | None

    @property
    def label(self) -> str:
        return f"{self.name} ({self.word})" if self.name else self.word

    @property
    def predicate(self) -> str | None:
        if _PARTNER_WORD.match(self.word):
            return "partner"
        if _FAMILY_WORD.match(self.word):
            return "family"
        return None


# --- Values ----------------------------------------------------------------------------------

_LEADING = re.compile(
    r"^(?:(?:a little bit of|a bit of|little bit of|very much|a|an|the|my|our|his|her|their|some|"
    r"mostly|also|really|just)\s+)+",
    re.IGNORECASE,
)
_TRAILING = re.compile(
    r"(?:\s+(?:lol|haha|lmao|tbh|honestly|now|too|though|tho|anymore|any more|these days|"
    r"nowadays|everywhere|a lot|mostly|really|here|there|pls|please|btw|fyi|at all|for now|"
    r"for a while|right now|currently|every day|daily|again|as well|either|in general|"
    r"at the moment|for sure|big time|obviously|lately|already|yet|today|fyi|atm|ok|"
    r"originally|online|most (?:nights|days|evenings|mornings|weekends|summers))\b)+$",
    re.IGNORECASE,
)
_WHEN_CUT = re.compile(rf"\s+(?:{_WHEN})\b.*$|\s+(?:since|for|ago)\b.*$", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|never|no|none|nothing|n't)\b|n't\b", re.IGNORECASE)
# "this variable name", "that": what the conversation is working on, not a lasting fact.
_DEICTIC = re.compile(r"(?:this|that|these|those|it|them|which|what)\b", re.IGNORECASE)
_WHEN_ONLY = re.compile(
    rf"(?:{_WHEN})|(?:{_NUMBERS}) (?:days?|weeks?|months?|years?)(?: ago)?", re.IGNORECASE
)
_RELATION_ONLY = re.compile(rf"(?:{_RELATIONS}|{_PETS}|life|you|job|work)", re.IGNORECASE)
_MAX_WORDS = 8


_PICTOGRAPHS = re.compile(r"\s*[\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F]+\s*$")


def _clean(value: str, cut: re.Pattern[str] | None) -> str:
    value = _PICTOGRAPHS.sub("", value).strip(" \t\"'.,;:!?()[]-")
    if cut is not None:
        value = cut.sub("", value)
    value = _TRAILING.sub("", value).strip(" \t\"'.,;:!?()[]-")
    value = _LEADING.sub("", value)
    return _TRAILING.sub("", value).strip(" \t\"'.,;:!?()[]-")


def _place_ok(value: str) -> bool:
    return (
        not re.match(r"\d", value)
        and not re.search(
            r"\b(?:decade|era|century|generation|wrong|body|life|time|moment|mood|zone)\b",
            value,
            re.I,
        )
        and not re.fullmatch(_MONTHS, value, re.IGNORECASE)
    )


def _tech_ok(value: str) -> bool:
    """After "we're on …": a named stack or version, not "my way", "a call" or a day ("I'm
    back on Monday", "on the 5th")."""
    return bool(re.match(r"\S*(?-i:[A-Z0-9])", value)) and not re.match(
        rf"(?:my|a|the|holiday|vacation|leave|call|break|{_DAYS}|{_MONTHS}|\d+(?:st|nd|rd|th))\b",
        value,
        re.IGNORECASE,
    )


def _allergen_ok(value: str) -> bool:
    """Not a joke allergy ("allergic to Mondays", "allergic to YAML")."""
    return not re.fullmatch(
        rf"(?:{_DAYS})s?|(?-i:[A-Z]{{2,}})|work|people|mornings?|meetings?|exercise|effort|"
        r"responsibility|adulting|homework|chores|bullshit|nonsense|drama",
        value,
        re.IGNORECASE,
    )


def _name_ok(value: str) -> bool:
    # "I'm Jewish", "I'm Catholic": adjectives, not names.
    if re.search(r"(?:ish|ian|ese|ic|ous|ive|ful|less|able|ing)$", value) and len(value) > 5:
        return False
    return value.lower() not in _NOT_NAMES and not re.fullmatch(
        _NATIONALITIES + "|" + _LANGUAGES, value, re.IGNORECASE
    )


# --- Rules -----------------------------------------------------------------------------------

_CUT_COMMON = (
    r"\s+a while(?: ago| back)?\b.*$|"
    r"\s+(?:so|because|since|but|which|who|when|while|though|as|cause|until|if|lol)\b.*$|"
    r"\s+that (?:i|we|you|he|she|they|my|our)\b.*$|"
    r"\s+(?:in the (?:mornings?|evenings?|afternoons?)|at night|on weekends|at weekends)\b.*$"
)
_CUT_PLACE = re.compile(
    rf"{_CUT_COMMON}|\s+(?:{_WHEN})\b.*$|\s+(?:for|with|since|ago|now|at the moment|"
    r"and|but|because|right now|these days|anymore|alone|by myself|with my)\b.*$",
    re.IGNORECASE,
)
_CUT_THING = re.compile(
    rf"{_CUT_COMMON}|\s+(?:{_WHEN})\b.*$|\s+(?:for (?:about |over |nearly |almost )?"
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|many|several|a few|"
    r"the past|ages)\b.*|since\b.*|(?:\w+ ){0,2}ago\b.*|at the moment.*|it is\b.*|they are\b.*|"
    r"to me\b.*|after\b.*|in (?:this|my|our) (?:house|home|code|family|project|repo|team)\b.*|"
    r"in everything\b.*)$",
    re.IGNORECASE,
)
_CUT_TOOL = re.compile(
    rf"{_CUT_COMMON}|\s+(?:{_WHEN})\b.*$|\s+(?:\w+ ){1, 2}ago\b.*$|"
    r"\s+(?:in prod(?:uction)?|in dev|for|with|on|at work|"
    r"at home|a lot|instead of|everywhere|day to day|since|in this|here)\b.*$",
    re.IGNORECASE,
)
_CUT_ROLE = re.compile(
    rf"{_CUT_COMMON}|\s+(?:by day|by trade|at|for|in|since|here|on|with|from)\b.*$",
    re.IGNORECASE,
)
_CUT_ORG = re.compile(
    rf"{_CUT_COMMON}|\s+(?:{_WHEN})\b.*$|\s+(?:on the|as a|as an|as|for (?:\d+|a|an|the past|"
    r"about|over|nearly|almost|\w+ years)|since|now)\b.*$",
    re.IGNORECASE,
)
_CUT_PLAN = re.compile(
    rf"{_CUT_COMMON}|\s+(?:for (?:a|an|one|two|three|four|five|six|\d+|a few|a couple of) "
    r"(?:days?|nights?|weeks?|months?)|to (?:see|visit|celebrate)|with (?:my|the|our)|and)\b.*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _Rule:
    """A verb phrase read right after a subject: ``predicate`` takes group ``v``; ``old``
    (switched_to's former side) and ``alt`` (prefers' alternative) compose the value as the
    set writes it; ``also`` maps further groups to further predicates of the same subject."""

    predicate: str
    pattern: re.Pattern[str]
    cut: re.Pattern[str] | None = None
    also: tuple[tuple[str, str, re.Pattern[str] | None], ...] = ()
    listed: bool = False
    check: Callable[[str], bool] | None = None
    user_only: bool = False
    # "I'm bilingual, Spanish and English": the values follow in the next clauses.
    opens_list: bool = False


def _rule(
    predicate: str,
    pattern: str,
    cut: re.Pattern[str] | None = _CUT_THING,
    **options: object,
) -> _Rule:
    # "I always/usually/only …": how often changes nothing a rule reads, but stays available
    # to the rules that need it ("only drink decaf", "always want type hints").
    often = r"(?:(?:always|usually|only|normally|generally|typically|mostly)\s+)?"
    compiled = re.compile(f"{often}(?:{pattern})", re.IGNORECASE)
    return _Rule(predicate, compiled, cut, **options)  # type: ignore[arg-type]


# "am", "is", "are" (and "was born", "was") with the degree words that may follow.
_DEGREE = (
    r"(?:(?:so|also|very|really|super|extremely|severely|deathly|still|currently|now|just|"
    r"actually|quite|pretty|a bit|slightly|mildly|seriously|definitely|totally|100%)\s+)*"
)
_BE = rf"(?:am|are|is|was born|was)\s+{_DEGREE}"
_AM = rf"(?:am|are|is)\s+{_DEGREE}"
_ING = r"(?:(?:am|are|is)\s+(?:(?:still|currently|now|also|actually|really)\s+)*)?"
_PLACE = r"(?P<v>.+)"
_REST = r"(?P<v>.+)"
_ROLE = (
    r"(?P<v>(?:(?!(?:as|at|for|in|a|an|the|of|to|with|and|or|but|so|not|no|my|our)\b)"
    rf"[\w+#./-]+\s+){{0,3}}?(?:{_JOBS}))\b"
)

_RULES: tuple[_Rule, ...] = (
    # Changes first: "use uv now instead of pip" is a switch, not a use.
    _rule(
        "moved_to",
        r"(?:moved|relocated) from (?-i:[A-Z][a-zà-ÿ]+)(?: [\w ]+?)? to "
        r"(?P<v>(?-i:[A-Z][a-zà-ÿ]).+)",
        _CUT_PLACE,
        check=_place_ok,
    ),
    _rule(
        "switched_to",
        r"(?:switched|moved|migrated|changed|went|converted|upgraded|jumped|ported \w+)"
        r"(?: (?:everything|it|us|over|all|the \w+))? from (?P<old>.+?) to (?P<v>.+)",
        _CUT_TOOL,
    ),
    _rule(
        "switched_to",
        r"(?:replaced|swapped|traded|dropped|ditched|exchanged) (?P<old>.+?) (?:with|for) "
        r"(?P<v>.+)",
        _CUT_TOOL,
    ),
    _rule(
        "switched_to",
        r"(?:has |have )?(?:moved|migrated|switched) (?:off|away from) (?P<old>.+?) "
        r"(?:onto|to) (?P<v>.+)",
        _CUT_TOOL,
    ),
    _rule(
        "switched_to",
        r"(?:use|using|run|running|am on|are on) (?P<v>.+?) (?:now )?(?:instead of|rather than) "
        r"(?P<old>.+)",
        _CUT_TOOL,
    ),
    _rule(
        "switched_to",
        r"(?:switched|migrated|changed|converted|upgraded|jumped) (?:over |back )?to (?P<v>.+)",
        _CUT_TOOL,
    ),
    _rule("no_longer", r"(?:am |are |is )?no longer (?:use |using )(?P<v>.+)", _CUT_TOOL),
    _rule("no_longer", r"(?:am |are |is )?no longer (?:a |an )?(?P<v>.+)", _CUT_THING),
    _rule("no_longer", r"(?:do not|don't) (?P<v>.+?) any ?more\b.*", None),
    _rule(
        "no_longer",
        r"(?:quit|stopped|gave up)(?: on)? (?:using |use )?(?P<v>.+)",
        _CUT_THING,
    ),
    _rule("no_longer", rf"{_AM}(?:a |an )?retired {_ROLE}", _CUT_ROLE),
    _rule("no_longer", r"used to be (?:a |an )(?P<v>.+)", _CUT_ROLE),
    _rule("no_longer", rf"{_AM}not (?:a |an )?(?P<v>(?:{_DIETS}|{_JOBS}))\b any ?more", None),
    _rule("no_longer", r"left (?P<v>(?:my |our )?(?:job|position|role|post) (?:at|with) .+)"),
    _rule("no_longer", r"used to (?P<v>(?!be\b).+)", _CUT_THING),
    _rule("no_longer", r"ex-(?P<v>[a-z]+)$", None),
    # Identity.
    _rule(
        "name",
        rf"name is (?P<v>{_NAME})(?: but .*? calls? me (?P<nick>{_NAME}))?",
        None,
        also=(("nick", "name", None),),
        check=_name_ok,
    ),
    _rule("name", rf"(?:go by|goes by) (?P<v>{_NAME})", None, check=_name_ok),
    _rule(
        "name",
        rf"(?:(?:everyone|everybody|people|friends|most people|they) )?(?:call|calls) me "
        rf"(?P<v>{_NAME})\b(?! (?-i:[A-Z]))",
        None,
        check=_name_ok,
        user_only=True,
    ),
    _rule("name", rf"(?:am|is) (?:called|named) (?P<v>{_NAME})", None, check=_name_ok),
    _rule(
        "age",
        rf"{_BE}(?P<v>\d{{1,3}})(?: years? old| y/?o| yrs?)?(?!\s*(?:%|minutes|mins|"
        r"hours|km|miles|kg|lbs|pounds|days|weeks|months|times|of|in|to|on|at|pm|am|foot|feet|ft|"
        r"cm|inches|stone|st|k|x|-|/|'|:|\.\d))\b",
        None,
    ),
    _rule("age", r"(?:turned|just turned) (?P<v>\d{1,3})\b", None),
    _rule("age", r"have (?P<v>\d{1,2}) years$", None, user_only=True),
    _rule(
        "age",
        r"(?:am |is )?(?:a |an )(?P<v>\d{1,2}) ?(?:yo|y/o|year old|years old|-year-old)\b"
        r"(?: (?P<field>[\w ]+?) student\b)?",
        None,
        also=(("field", "studies", None),),
    ),
    _rule(
        "from",
        rf"{_BE}(?:originally |born and raised |half )?from {_PLACE}",
        _CUT_PLACE,
        check=_place_ok,
    ),
    _rule("from", rf"(?:come|comes|came) from {_PLACE}", _CUT_PLACE, check=_place_ok),
    _rule(
        "from",
        rf"(?:grew up|was raised|were raised|was born|born(?: and raised)?) in {_PLACE}",
        _CUT_PLACE,
        check=_place_ok,
    ),
    _rule("birthday", r"(?:was born|born) on (?P<v>.+)", re.compile(_CUT_COMMON, re.I)),
    _rule(
        "birthday",
        rf"(?:was born|born) (?:in |on )?(?P<v>(?:{_MONTHS})\b(?: \d{{1,2}}(?:st|nd|rd|th)?)?|"
        rf"\d{{1,2}}(?:st|nd|rd|th)? (?:of )?(?:{_MONTHS}))\b",
        None,
    ),
    _rule(
        "from",
        rf"{_AM}(?P<v>(?:half[- ])?(?-i:{_NATIONALITIES}))\b(?!\s+(?:food|speaker|"
        r"class|lessons|teacher|citizen))",
        None,
    ),
    _rule(
        "name",
        rf"{_AM}(?P<v>{_NAME})(?:\s+(?:here|btw|by the way))?\s*$",
        None,
        check=_name_ok,
        user_only=True,
    ),
    # Where.
    _rule(
        "lives_in",
        rf"{_ING}(?:live|lives|living|have lived|has lived|based|located|settled)"
        r"(?: \w+ly| alone| here)?"
        rf" (?:in|out in|near) (?:(?:a|an|the) [\w -]+? (?:in|near|outside) )?{_PLACE}",
        _CUT_PLACE,
        check=_place_ok,
    ),
    _rule("lives_in", r"(?:call|calls) (?P<v>.+?) home\b", _CUT_PLACE),
    _rule(
        "moved_to",
        r"(?:moved|relocated|transferred)(?: out of [\w ]+?| back| over| house|"
        r" (?:us|me|everyone|the (?:whole )?family|the kids))? to "
        r"(?P<v>(?-i:[A-Z]).+|(?:a|an) [\w -]+? in (?-i:[A-Z]).+)",
        _CUT_PLACE,
        check=_place_ok,
    ),
    _rule("from", rf"moved (?:here |over )?from {_PLACE}", _CUT_PLACE, check=_place_ok),
    _rule(
        "moved_to",
        r"(?:moved|moving) into (?:a|an|our|my) (?:new |little )?(?:place|flat|house|apartment|"
        r"home|condo) in (?P<v>(?-i:[A-Z]).+)",
        _CUT_PLACE,
        check=_place_ok,
    ),
    # Work and study.
    _rule(
        "studies",
        r"(?:a |an )?(?:[\w-]+ )*?student (?:in|of|studying) (?P<v>.+)",
        re.compile(rf"{_CUT_THING.pattern}|\s+(?:at|in) (?-i:[A-Z]).*$", re.IGNORECASE),
    ),
    _rule(
        "studies",
        rf"{_BE}(?:a |an )(?:first[- ]year |second[- ]year |third[- ]year |final[- ]year )?"
        r"(?P<v>(?!(?:university|uni|college|high school|school|grad|phd|mature|exchange|"
        r"international|former|ex|poor|broke)\b)[\w-]+(?: [\w-]+)?) student\b",
        None,
    ),
    _rule(
        "studies",
        rf"{_ING}(?:started (?:taking )?|taking |take |doing |having )(?P<v>(?-i:{_LANGUAGES})) "
        r"(?:lessons|classes|courses?)\b",
        None,
    ),
    _rule(
        "studies",
        rf"{_ING}(?:doing|taking|studying for) (?:a |an |my )?(?:master'?s|masters|phd|degree|"
        r"bachelor'?s|ba|bsc|msc|ma) (?:degree )?in (?P<v>.+)",
        _CUT_THING,
    ),
    _rule(
        "works_as",
        rf"(?:(?:{_BE}|(?:have been|been|was|were) )(?:a |an )?|a |an ){_ROLE}(?:.*?\b(?:at|for) "
        rf"(?!(?:{_NUMBERS}|about|over|nearly|almost|the past|many) (?:years?|months?))"
        r"(?P<at>.+))?",
        _CUT_ROLE,
        also=(("at", "works_at", _CUT_ORG),),
    ),
    _rule("works_as", rf"as (?:a |an )?{_ROLE}", _CUT_ROLE),
    _rule(
        "works_as",
        rf"{_ING}(?:work|works|working|worked) (?:as|like) (?:a |an )?(?P<v>.+?)(?: (?:at|for|in) "
        r"(?P<at>.+))?$",
        _CUT_ROLE,
        also=(("at", "works_at", _CUT_ORG),),
    ),
    _rule(
        "works_at",
        rf"{_ING}(?:work|works|working|worked|teach|teaches|teaching|taught)"
        r"(?: \w+ly| full[- ]time| part[- ]time| nights| days| shifts)?"
        rf" (?:at|for) (?:an? [\w -]+? (?:called|named) )?(?P<v>.+)",
        _CUT_ORG,
    ),
    _rule("works_at", r"(?:run|own and run|run and own) (?P<v>(?:a|an) .+)", _CUT_ORG),
    _rule("works_at", rf"(?:{_BE})?employed (?:by|at) (?P<v>.+)", _CUT_ORG),
    _rule(
        "works_at",
        r"at (?P<v>(?-i:[A-Z])[\w&.-]+(?: (?-i:[A-Z])[\w&.-]+)*) for "
        rf"(?:(?:about|over|nearly|almost) )?(?:{_NUMBERS}) (?:years?|months?)\b",
        None,
    ),
    _rule(
        "works_at",
        rf"(?:{_BE})?(?:a |an )?(?:[\w-]+-person |small |tiny )?(?:team|job|position|role|"
        r"internship) (?:at|with) (?:an? [\w -]+? (?:called|named) )?(?P<v>.+)",
        _CUT_ORG,
    ),
    _rule(
        "works_at",
        r"(?:got|started|landed|took|accepted|have|just started|begin|began) "
        r"(?:a |my |the )?(?:new )?(?:job|position|role|internship|gig) (?:at|with) (?P<v>.+)",
        _CUT_ORG,
    ),
    _rule(
        "works_at",
        rf"{_ING}building (?:this|it) for (?:my|our) (?:startup|company|business|"
        rf"employer|job),? (?P<v>{_NAME})",
        None,
    ),
    _rule(
        "studies",
        rf"{_ING}(?:studying|study|studies|majoring in|major in|learning|learn)"
        rf" (?!for\b|to\b|how\b)(?P<v>.+?)(?: (?:at|in) (?P<at>(?-i:[A-Z]).+?))?"
        rf"(?: (?:on|with|using) (?P<app>(?-i:[A-Z]).+))?$",
        _CUT_THING,
        also=(("at", "studies", _CUT_THING), ("app", "uses", _CUT_TOOL)),
    ),
    _rule(
        "studies",
        rf"{_ING}(?:studying|revising|preparing) for (?P<v>.+)",
        _CUT_THING,
        check=lambda v: bool(re.search(r"(?-i:[A-Z])", v)),
    ),
    _rule(
        "studies",
        rf"{_ING}(?:taking|doing|attending) (?:evening |night |online |weekly )?"
        r"(?:classes|lessons|courses?|a course|a degree|a phd|a masters|an mba) in (?P<v>.+)",
        _CUT_THING,
    ),
    _rule("studies", r"(?:just )?got into (?P<v>.+)", _CUT_THING),
    # Health and food.
    _rule(
        "allergic_to",
        rf"{_BE}(?:allergic|allergic af) to (?P<v>.+)",
        re.compile(rf"{_CUT_COMMON}|\s+(?:{_WHEN})\b.*$", re.IGNORECASE),
        listed=True,
        check=_allergen_ok,
    ),
    _rule(
        "allergic_to",
        r"(?:have|has) (?:an? |bad |severe )*(?P<v>.+?) allergy\b",
        None,
        check=_allergen_ok,
    ),
    _rule(
        "health_condition",
        rf"(?:have|has|got|had|live with|living with|suffer from|"
        rf"suffers from|struggle with) (?P<v>(?:{_CONDITIONS}))\b",
        None,
    ),
    _rule("health_condition", r"(?:got |was |been |were )?diagnosed with (?P<v>.+)", _CUT_THING),
    _rule("health_condition", rf"{_BE}(?P<v>{_CONDITION_ADJECTIVES})\b", None),
    _rule(
        "diet",
        rf"(?:{_BE})?(?:on an? |doing |following an? |eating )?(?P<v>{_DIETS})\b"
        r"(?! (?:food|restaurant|place|options?|recipes?|dish|meal|friends?)\b)",
        None,
    ),
    _rule(
        "diet", rf"{_ING}(?:doing|eat|eating|keep|keeping|follow|following) (?P<v>{_DIETS})\b", None
    ),
    _rule("diet", r"(?P<v>only (?:eat|drink) .+)", _CUT_THING),
    _rule("diet", rf"(?:eat|eats) (?P<v>(?:{_DIETS}))\b", None),
    # Likes and preferences.
    _rule(
        "prefers",
        r"(?:prefer|prefers) (?P<v>.+?) (?:over|to|rather than|instead of|than) "
        r"(?P<alt>.+)",
        _CUT_THING,
    ),
    _rule(
        "prefers",
        r"would rather (?:have |use |do |go with |see |get )?(?P<v>.+?) than "
        r"(?:have |use |do )?(?P<alt>.+)",
        _CUT_THING,
    ),
    _rule(
        "prefers", r"(?:prefer|prefers|(?:always|usually) (?:want|prefer)) (?P<v>.+)", _CUT_THING
    ),
    _rule(
        "dislikes",
        r"(?:hate|hates|dislike|dislikes|detest|loathe|despise|can't stand|"
        r"cannot stand|can not stand|don't like|do not like|don't enjoy|do not enjoy|"
        r"can't bear|am not a fan of|am not into|don't care for|never liked|never enjoyed) "
        r"(?P<v>.+)",
        _CUT_THING,
        listed=True,
    ),
    _rule(
        "likes",
        rf"{_BE}(?:a |an )?(?:huge |big |massive |die-?hard |lifelong )?fan of "
        r"(?P<v>.+)",
        _CUT_THING,
        listed=True,
    ),
    _rule(
        "likes",
        rf"{_BE}(?:a |an )?(?:huge |big |massive |die-?hard |lifelong )?(?P<v>.+?)"
        r" fan\b",
        None,
    ),
    _rule(
        "likes",
        rf"(?:{_BE})?(?:obsessed with|into|crazy about|mad about|passionate about) "
        r"(?P<v>.+)",
        _CUT_THING,
        listed=True,
    ),
    _rule(
        "likes",
        r"(?:love|loves|like|likes|enjoy|enjoys|adore|adores|really like|always (?:loved|liked)|"
        r"am loving|am enjoying) "
        r"(?:how (?P<how>\S+) .*|(?P<v>(?!to\b|it\b|that\b|this\b|when\b|you\b|my\b|our\b).+))",
        _CUT_THING,
        listed=True,
    ),
    _rule("likes", r"favou?rite \w+(?: \w+)? (?:is|are) (?P<v>.+)", _CUT_THING),
    _rule("hobby", r"(?:hobby is|hobbies are|hobbies include) (?P<v>.+)", _CUT_THING, listed=True),
    # People and animals the user has.
    _rule(
        "family",
        rf"(?:have|has|have got|got) (?P<v>(?:{_NUMBERS}) (?:kids|children|sons|"
        r"daughters|boys|girls|grandkids|grandchildren|brothers|sisters|siblings))\b",
        None,
    ),
    _rule(
        "family",
        rf"(?:{_BE})?(?:(?:a |an )?(?:married with|mum of|mom of|mother of|dad of|father of|"
        rf"parent of|parents of)) (?P<v>(?:{_NUMBERS})(?: (?:kids|children|boys|girls|sons|"
        r"daughters|little ones))?)\b",
        None,
    ),
    _rule(
        "has_pet",
        rf"(?:have|has|have got|got|adopted|rescued) (?:a|an|two|three|our|the)? ?"
        rf"(?:new )?(?:little )?(?P<v>(?:[\w-]+ )?(?:{_PETS})s?)\b(?:(?:,| who is| that is)? "
        rf"(?:named|called) (?P<name>{_NAME}))?",
        None,
    ),
    # Things and tools.
    _rule(
        "owns",
        r"(?:own|owns|bought|just bought|have got|got myself|(?=drives? (?:an? )?(?-i:[A-Z]))"
        r"drive|drives) "
        rf"(?!(?:{_RELATIONS}|{_PETS})\b)(?P<v>(?:a|an|my|our|the|two|\w+)\b.+)",
        _CUT_THING,
        listed=True,
    ),
    _rule(
        "uses",
        # "I'm back to using Postgres": a use again.
        r"(?:(?:am|are) back to )?"
        r"(?:use|uses|using|rely on|relies on|work with|deploy with|deploy on|"
        r"deploy to|run on|run|code on|code in|program in|write in|"
        r"develop on|develop in|build with|host on|are all in|am all in) (?P<v>.+)",
        _CUT_TOOL,
        listed=True,
        check=lambda v: not re.match(r"(?:it|this|that|them)\b", v, re.I),
    ),
    _rule("uses", rf"{_AM}(?:back )?on (?P<v>.+)", _CUT_TOOL, listed=True, check=_tech_ok),
    _rule(
        "uses",
        r"(?:write|writes|writing) (?:in )?(?P<v>(?-i:[A-Z])\S*(?: \d[\w.]*)?)$",
        _CUT_TOOL,
        listed=True,
        check=_tech_ok,
    ),
    _rule(
        "uses",
        rf"{_STACK} (?:is|are) (?P<v>.+?)(?: on (?P<host>.+))?$",
        _CUT_TOOL,
        also=(("host", "uses", _CUT_TOOL),),
        check=_tech_ok,
    ),
    # Plans: a thing underway with a time it is for, or an intention.
    _rule(
        "plans",
        r"(?:am|are)\s+(?:(?:also|finally|actually|really)\s+)?"
        r"(?P<v>(?!doing\b|going to (?!the\b|a\b|an\b|my\b|our\b)(?-i:[a-z]))"
        rf"\w+ing\b.*?\b(?:{_WHEN}))",
        _CUT_PLAN,
    ),
    _rule(
        "plans",
        rf"(?P<v>(?:starts?|begins?|leaves?|graduates?|moves?|retires?|flies|fly|"
        rf"travels?|heads?|returns?|turns?|finishes|finish|gets? married)\b.*?\b(?:{_WHEN}))",
        _CUT_PLAN,
    ),
    _rule(
        "plans",
        rf"(?:am|are|is) going to (?P<v>(?!the\b|a\b|an\b|my\b|our\b|be\b)(?-i:[a-z])+\b.*?"
        rf"\b(?:{_WHEN}))",
        _CUT_PLAN,
    ),
    _rule(
        "plans",
        r"(?:plan|plans|planning|intend|intending|are going|am going|is going) to "
        r"(?P<v>.+)",
        _CUT_PLAN,
        check=lambda v: bool(re.search(rf"\b(?:{_WHEN})", v, re.IGNORECASE)),
    ),
    _rule(
        "birthday",
        r"birthday (?:is on |is in |is |on |in )(?P<v>.+)",
        re.compile(_CUT_COMMON, re.I),
    ),
    _rule(
        "speaks",
        r"(?:speak|speaks|am fluent in|is fluent in|are fluent in|fluent in) "
        r"(?:fluent |some |a little |basic |good |decent |native )?(?P<v>.+)",
        _CUT_THING,
        listed=True,
        check=lambda v: bool(re.fullmatch(_LANGUAGES, v, re.IGNORECASE)),
    ),
    _rule("speaks", rf"{_AM}(?:a )?native (?P<v>{_LANGUAGES}) speaker", None),
    _rule(
        "speaks",
        rf"{_AM}(?:bilingual|trilingual|multilingual)(?: in)?,? ?(?P<v>.*)",
        _CUT_THING,
        listed=True,
        opens_list=True,
        check=lambda v: bool(re.fullmatch(_LANGUAGES, v, re.IGNORECASE)),
    ),
    _rule(
        "hobby",
        r"(?:play|plays|playing) (?:the )?(?P<v>(?!on\b|with\b|around\b|it\b)[\w -]+)",
        _CUT_THING,
    ),
    _rule(
        "hobby",
        rf"{_ING}(?:doing|do|practi[sc]e|practi[sc]ing) (?P<v>[\w -]+?)"
        rf"(?= (?:every|on (?:{_DAYS})|on weekends|since|at the|twice|once|three times|"
        r"for (?:about |over )?\w+ years))",
        None,
    ),
    _rule(
        "hobby",
        r"(?:started (?:taking )?|taking |take |took up |taken up |picked up )"
        rf"(?!(?:{_LANGUAGES}) )(?P<v>[\w -]+ "
        r"(?:lessons|classes))\b",
        None,
    ),
)

# "Gerald": the relations a turn has named, so that a later "he" or "Gerald" is theirs.
_MENTION = re.compile(
    rf"\b(?:my|our) (?P<rel>{_RELATIONS})\b(?!'s \w)(?:,? (?P<name>{_NAME}))?"
    rf"|\b(?:have|has|got) (?:a|an|one|two) (?:(?P<age>\d{{1,2}})[- ]year[- ]old )?"
    rf"(?P<rel2>{_RELATIVES}),? (?:named |called )?(?P<name2>{_NAME})"
    # "Jo, my wife, says …", "Meet Hamza, my little brother".
    rf"|(?:^\W*|\bmeet )(?P<name3>{_NAME}), (?:my|our) (?P<rel3>{_RELATIONS})\b(?=,|$)",
    re.IGNORECASE,
)
# A pet's kind is written without its count or how the user came by it: "two cats" is "cats",
# "a rescue greyhound" "greyhound".
_PET_WORDS = re.compile(
    rf"^(?:(?:{_NUMBERS}|rescue|rescued|adopted|new|little|old|young|senior|baby|sweet)\s+)+",
    re.IGNORECASE,
)
_PET_NAMED = re.compile(
    rf"(?:\b(?:a|an|my|our|the)(?: new| little)? )(?P<kind>(?:[\w-]+ )?(?:{_PETS}))"
    rf"(?:,| who is| that is)? (?:named|called|(?:his|her|its|their) name is) (?P<name>{_NAME})"
    rf"|\b(?:my|our) (?P<kind2>{_PETS}),? (?P<name2>{_NAME})"
    rf"|(?:^\W*|\bmeet )(?P<name3>{_NAME}), (?:my|our) (?P<kind3>{_PETS})\b(?=,|$)",
    re.IGNORECASE,
)
# "Me and my husband Dev …", "my partner Sam and I …": the user's household, a "we".
_COMPOUND = re.compile(
    rf"\b(?:me|i) and my (?:{_RELATIONS})(?:,? {_NAME})?\b|"
    rf"\bmy (?:{_RELATIONS})(?:,? {_NAME})? and (?:i|me)\b",
    re.IGNORECASE,
)
# Facts whose parts a comma separates, read over the whole sentence before it is cut.
_SENTENCE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "switched_to",
        re.compile(
            r"\b(?:gave up on|gave up|dropped|ditched|abandoned|done with) (?P<old>[\w.+# -]+?)"
            r"(?: for [\w ]+)?,? (?:and )?(?:went |going |are |am |now )?back to (?P<v>[\w.+# -]+)"
            r"|\bno more (?P<old2>[\w.+# -]+?)(?: for (?:us|me))?,? (?:we|i) (?:have )?"
            r"(?:moved|switched|migrated)(?: everything| it all| all)? (?:over )?to "
            r"(?P<v2>[\w.+# -]+)",
            re.IGNORECASE,
        ),
    ),
    (
        "works_at",
        re.compile(
            rf"\b(?:for|at|with|run|own|founded|started) (?:my|our) (?:own )?(?:startup|company|"
            rf"business|agency|studio|shop|firm|employer),? (?:called |named )?(?P<v>{_NAME})",
            re.IGNORECASE,
        ),
    ),
    (
        "speaks",
        re.compile(
            rf"(?:^\W*|[,;] )(?P<v>(?-i:{_LANGUAGES})) is my (?:first|native|mother|main|home|"
            r"second|third) (?:language|tongue)"
            rf"|\bmy (?:first|native|second|main|home) language is (?P<v2>(?-i:{_LANGUAGES}))"
            rf"|\bmy mother tongue is (?P<v3>(?-i:{_LANGUAGES}))",
            re.IGNORECASE,
        ),
    ),
    # The thing first, then what it is to the user: "jazz is my thing", "home is Nairobi".
    (
        "likes",
        re.compile(
            r"(?:^\W*|[,;] )(?P<v>[\w' -]{2,30}?) (?:is|are) (?:my|our) (?:thing|jam|passion|"
            r"favou?rite thing)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "dislikes",
        re.compile(
            r"(?:^\W*|[,;] )(?P<v>[\w' -]{2,30}?) (?:is|are) (?:not|never) (?:for me|my thing)\b"
            r"|\bthe (?:one |only )?thing i (?:really )?(?:dislike|hate|can't stand) (?:most )?is "
            r"(?P<v2>[\w' -]+)",
            re.IGNORECASE,
        ),
    ),
    (
        "hobby",
        re.compile(
            r"(?:^\W*|[,;] )(?P<v>\w+ing(?: \w+)?) is what i do\b"
            r"|^\W*(?:my )?weekends are (?:for|all about) (?P<v2>[\w' -]+)",
            re.IGNORECASE,
        ),
    ),
    ("lives_in", re.compile(rf"(?:^\W*|[,;] )home is (?P<v>{_NAME}(?: {_NAME})*)", re.IGNORECASE)),
    (
        "owns",
        re.compile(
            r"\bmy (?:phone|laptop|car|bike|camera|computer|pc|tablet|watch|guitar|console) "
            r"(?:is|'s) an? (?P<v>(?-i:[A-Z])[\w.-]*(?: (?-i:[A-Z0-9])[\w.-]*){0,2})",
            re.IGNORECASE,
        ),
    ),
    (
        "studies",
        re.compile(
            r"\bmy (?:uni |university |college )?(?:course|degree|major) is (?:in )?"
            r"(?P<v>[\w' -]+?)(?= and\b| but\b|[,.;]|$)",
            re.IGNORECASE,
        ),
    ),
    # "As a data engineer I …", "as a Brazilian I …", "as a 62 year old woman I …".
    (
        "works_as",
        re.compile(
            rf"^\W*as an? (?P<v>(?:[\w-]+ ){{0,2}}(?:{_JOBS})) (?:i|we)\b",
            re.IGNORECASE,
        ),
    ),
    ("from", re.compile(rf"^\W*as an? (?P<v>(?-i:{_NATIONALITIES})),? (?:i|we)\b", re.IGNORECASE)),
    ("age", re.compile(r"^\W*as an? (?P<v>\d{1,2})[- ]year[- ]old\b", re.IGNORECASE)),
    (
        "allergic_to",
        re.compile(
            r"(?:^\W*|[,;] )(?P<v>[a-z]+(?: [a-z]+)?) allergy here\b",
            re.IGNORECASE,
        ),
    ),
)
# A role alone, after the user's name: "I'm Ahmed, backend dev at a logistics company".
_ROLE_BARE = re.compile(
    rf"^(?:a |an )?{_ROLE}(?: (?:here|by trade))?(?: (?:at|for) (?P<at>.+))?$", re.IGNORECASE
)
_SHORT_FOR = re.compile(rf"^short for (?P<v>{_NAME})$", re.IGNORECASE)
_AGE_BARE = re.compile(
    r"^(?P<v>\d{1,2})(?:\s*(?:m|f|male|female|yo|y/o))?(?: from (?P<from>.+))?$", re.IGNORECASE
)


# A sentence written as a form's field: its label's predicate, one fact per item listed.
_FIELDS: tuple[tuple[str, str], ...] = (
    (
        "uses",
        r"(?:(?:tech|my|our|the) )?stack|tools(?: i use)?(?: daily| every day| at work)?|"
        r"editor|ide|os|shell|setup",
    ),
    ("hobby", r"(?:my )?(?:hobbies|hobby|interests)"),
    ("works_at", r"employer|company|workplace|where i work|work"),
    ("works_as", r"role|job title|occupation|profession|position"),
    ("from", r"hometown|home town|born in|originally from"),
    ("lives_in", r"current (?:town|city|home)|location|based in|currently in"),
    ("birthday", r"(?:my )?(?:birthday|b-?day|bday|dob|date of birth)"),
    ("allergic_to", r"allergies|allergic to|things i am allergic to|allergens"),
    ("dislikes", r"i hate|pet peeves|i can't stand|i cannot stand|dislikes"),
    ("speaks", r"languages(?: i speak)?|i speak"),
    ("diet", r"diet"),
    ("age", r"age"),
)
_FIELD = re.compile(
    rf"^\W*(?P<key>{'|'.join(label for _, label in _FIELDS)})\s*(?::|=|\s-+|\s\u2014)\s*"
    r"(?P<v>[^?]+?)[.!]*$",
    re.IGNORECASE,
)
_FIELD_CHECKS: dict[str, Callable[[str], bool]] = {
    "speaks": lambda v: bool(re.fullmatch(_LANGUAGES, v, re.IGNORECASE)),
    "age": lambda v: bool(re.fullmatch(r"\d{1,3}", v)),
    "birthday": lambda v: bool(re.search(rf"\d|\b(?:{_MONTHS})\b", v, re.IGNORECASE)),
    "from": lambda v: _place_ok(v) and bool(re.match(r"(?-i:[A-Z])", v)),
    "lives_in": lambda v: _place_ok(v) and bool(re.match(r"(?-i:[A-Z])", v)),
    "allergic_to": lambda v: _allergen_ok(v) and not re.match(r"(?:my|our|ex)\b", v, re.I),
    "works_at": lambda v: not re.fullmatch(r"(?:everything|nothing|stuff|fine|ok|busy)", v, re.I),
}
_ABOUT_ME = re.compile(
    r"^\W*(?:about me|a bit about me|me|bio|quick bio|some context on me)\s*:\s*", re.IGNORECASE
)

# Listed predicates whose items are recognisable alone, so that a comma may go on with the
# list: a language, a tool's one-word name ("I use Emacs, org-mode for notes").
_COMMA_ITEMS = {
    "speaks": re.compile(rf"(?:{_LANGUAGES})", re.IGNORECASE),
    "uses": re.compile(r"(?:[\w.+#]*[-.+#\d][\w.+#-]*|(?-i:[A-Z])[\w.+#-]+)(?: for .*)?"),
}

# A fragment with a person in it is a clause of its own, not an item of a list.
_PERSONAL = re.compile(r"\b(?:i|me|you|we|us|he|she|him|it|they|them)\b", re.IGNORECASE)


@dataclass
class _State:
    """What a turn has established so far: the relation a pronoun refers to, the names."""

    last: _Relation | None = None
    named: dict[str, _Relation] | None = None


def _split_clauses(sentence: str) -> list[tuple[str, bool]]:
    """The sentence's clauses, each with whether it follows an "and"/"or" (a list goes on)."""
    clauses: list[tuple[str, bool]] = []
    position = 0
    joined = False
    for found in _CLAUSE_BREAK.finditer(sentence):
        if found.start() > position or found.end() == len(sentence):
            clauses.append((sentence[position : found.start()].strip(), joined))
        joined = bool(_LIST_JOIN.fullmatch(found.group()))
        position = found.end()
    clauses.append((sentence[position:].strip(), joined))
    return [(text, joined) for text, joined in clauses if text.strip(" .!?,")]


def _subject(clause: str, state: _State) -> tuple[str | None, _Relation | None, str]:
    """Who the clause is about (``"user"``, a relation, or None for someone else; "" when it
    has no subject of its own) and the rest of it, from its verb on."""
    lead = _LEAD.match(clause)
    rest = clause[lead.end() :] if lead else clause
    if found := _MY_THING.match(rest):
        return "user", None, rest[found.end() :]
    if found := _MY_RELATION.match(rest):
        relation = _Relation(found.group("rel").lower(), found.group("name"))
        if relation.name is None and state.named:
            relation = next(
                (known for known in state.named.values() if known.word == relation.word), relation
            )
        state.last = relation
        after = rest[found.end() :]
        return "relation", relation, after.lstrip()
    if found := _USER.match(rest):
        return "user", None, rest[found.end() :].lstrip()
    if found := _PRONOUN.match(rest):
        # "he" with no one named before: someone else's, not a fact of the user's.
        kind = "relation" if state.last is not None else None
        return kind, state.last, rest[found.end() :].lstrip()
    for name, relation in (state.named or {}).items():
        if re.match(rf"{re.escape(name)}\b(?!')", rest):
            state.last = relation
            return "relation", relation, rest[len(name) :].lstrip()
    return "", None, rest


def _values(rule: _Rule, found: re.Match[str]) -> list[tuple[str, str]]:
    """The (predicate, value) pairs a rule's match states, values cut and composed."""
    groups = found.groupdict()
    raw = groups.get("v") or groups.get("how")
    if raw is None:
        return []
    value = _clean(raw, rule.cut)
    out: list[tuple[str, str]] = []
    if rule.predicate == "switched_to" and groups.get("old"):
        old = _clean(groups["old"], _CUT_TOOL)
        if old and value:
            out.append((rule.predicate, f"{old} -> {value}"))
    elif rule.predicate == "prefers" and groups.get("alt"):
        alternative = _clean(groups["alt"], _CUT_THING)
        if alternative and value:
            out.append((rule.predicate, f"{value} over {alternative}"))
    elif rule.predicate == "has_pet":
        kind = _PET_WORDS.sub("", value)
        out.append((rule.predicate, f"{kind}: {groups['name']}" if groups.get("name") else kind))
    elif rule.listed:
        out.extend((rule.predicate, part) for part in _list_items(value))
    elif value:
        out.append((rule.predicate, value))
    for group, predicate, cut in rule.also:
        if groups.get(group):
            extra = _clean(groups[group], cut)
            if extra:
                out.append((predicate, extra))
    return [
        (predicate, value)
        for predicate, value in out
        if value
        and len(value.split()) <= _MAX_WORDS
        and not _NEGATED.search(value)
        and not _DEICTIC.match(value)
        and not _WHEN_ONLY.fullmatch(value)
        and not (predicate in ("likes", "dislikes") and _RELATION_ONLY.fullmatch(value))
        and (rule.check is None or predicate != rule.predicate or rule.check(value))
    ]


def _list_items(value: str) -> list[str]:
    return [
        item
        for part in re.split(r"\s*,\s*|\s+(?:and|or|&)\s+", value)
        if (item := _clean(part, None))
    ]


@dataclass
class _Reading:
    """Where a sentence's reading stands: whom its clauses are about, and the listed
    predicate the last clause ended on (which a bare "and X" goes on with)."""

    sentence: str
    state: _State
    subject: str | None = None
    relation: _Relation | None = None
    listing: str | None = None
    # Whether the clause read is the sentence's first, and whether the user has just given a
    # name: "I'm Lena, platform team lead here", "Kofi here, 34" (a bare role or age is theirs).
    first: bool = False
    after_name: bool = False

    def fact(self, predicate: str, value: str) -> Fact | None:
        """The fact of the clause's subject, or for "my mom's name is Rosa", the user's."""
        if self.subject != "relation" or self.relation is None:
            self.after_name = predicate == "name"
            return Fact("user", predicate, value, self.sentence)
        if predicate != "name":
            return Fact(self.relation.label, predicate, value, self.sentence)
        # A relation named is a fact of the user's, and "she" or "Rosa" later in the turn is
        # "Rosa (mom)".
        named = _Relation(self.relation.word, value)
        self.state.named = {**(self.state.named or {}), value: named}
        self.state.last = named
        kind = self.relation.predicate
        return Fact("user", kind, f"{self.relation.word}: {value}", self.sentence) if kind else None


def _mention_facts(sentence: str, state: _State, *, guarded: bool) -> list[Fact]:
    """Relations named anywhere, even in a question, are who a later "he" or "Zoe" is; named
    outside a guarded clause, they are the user's family or partner."""
    facts = []
    clauses = _split_clauses(sentence)
    for found in _MENTION.finditer(sentence):
        word = (found.group("rel") or found.group("rel2") or found.group("rel3")).lower()
        name = found.group("name") or found.group("name2") or found.group("name3")
        relation = _Relation(word, name if name is not None and _name_ok(name) else None)
        state.last = relation
        if relation.name is None:
            continue
        state.named = {**(state.named or {}), relation.name: relation}
        head = found.group().split(",")[0]
        clause = next((text for text, _ in clauses if head in text), sentence)
        if guarded or _CLAUSE_GUARD.search(clause):
            continue
        if relation.predicate:
            facts.append(Fact("user", relation.predicate, f"{word}: {relation.name}", sentence))
        if found.group("age"):
            facts.append(Fact(relation.label, "age", found.group("age"), sentence))
    return facts


def _sentence_rule_facts(sentence: str) -> tuple[list[Fact], str]:
    """The facts of ``_SENTENCE_RULES``, and the sentence with what they read blanked out (so
    that "gave up on Kotlin …, back to Java" is not also a no_longer)."""
    facts = []
    for predicate, pattern in _SENTENCE_RULES:
        for found in pattern.finditer(sentence):
            clause = sentence[: found.start()].rsplit(",", 1)[-1] + found.group()
            if _CLAUSE_GUARD.search(clause):
                continue
            groups = {key: value for key, value in found.groupdict().items() if value}
            value = _clean(groups.get("v") or groups.get("v2") or groups.get("v3", ""), _CUT_TOOL)
            if not value or (predicate == "allergic_to" and not _allergen_ok(value)):
                continue
            if old := groups.get("old") or groups.get("old2"):
                value = f"{_clean(old, _CUT_TOOL)} -> {value}"
            facts.append(Fact("user", predicate, value, sentence))
            blank = " " * len(found.group())
            sentence = sentence[: found.start()] + blank + sentence[found.end() :]
    return facts, sentence


def _pet_facts(sentence: str) -> list[Fact]:
    """A pet named where it is mentioned: "the new puppy, a border collie named Scout"."""
    facts = []
    for found in _PET_NAMED.finditer(sentence):
        kind = found.group("kind") or found.group("kind2") or found.group("kind3")
        kind = _PET_WORDS.sub("", _LEADING.sub("", kind))
        name = found.group("name") or found.group("name2") or found.group("name3")
        facts.append(Fact("user", "has_pet", f"{kind}: {name}", sentence))
    return facts


def _rule_facts(rest: str, reading: _Reading) -> list[Fact] | None:
    """The facts of the first rule that matches the clause's verb phrase (None: none did)."""
    if (
        reading.subject == "user"
        and (reading.first or reading.after_name)
        and (bare := _AGE_BARE.match(rest))
    ):
        # "26 m from dublin", or "29" after "I'm Priya," (not "16:8", "year 9 and 10").
        reading.listing = None
        facts = [Fact("user", "age", bare.group("v"), reading.sentence)]
        if bare.group("from"):
            place = _clean(bare.group("from"), _CUT_PLACE)
            facts.append(Fact("user", "from", place, reading.sentence))
        return facts
    named = _NAME_HERE.match(rest) if reading.first else None
    if reading.after_name:
        # "call me Bash, short for Bashir"
        named = _SHORT_FOR.match(rest)
    if reading.subject == "user" and named and _name_ok(named["v"]):
        reading.listing = None
        return [fact for fact in [reading.fact("name", named["v"])] if fact is not None]
    if reading.subject == "user" and reading.after_name and (role := _ROLE_BARE.match(rest)):
        facts = [Fact("user", "works_as", _clean(role.group("v"), _CUT_ROLE), reading.sentence)]
        if role.group("at") and (org := _clean(role.group("at"), _CUT_ORG)):
            facts.append(Fact("user", "works_at", org, reading.sentence))
        return facts
    for rule in _RULES:
        if rule.user_only and reading.subject != "user":
            continue
        matched = rule.pattern.match(rest)
        if matched is None:
            continue
        pairs = _values(rule, matched)
        if not pairs and not (rule.opens_list and not matched.group("v").strip()):
            continue
        reading.listing = rule.predicate if rule.listed else None
        return [fact for pair in pairs if (fact := reading.fact(*pair)) is not None]
    return None


def _list_goes_on(rest: str, reading: _Reading) -> Fact | None:
    """ "… peanuts and tree nuts": a bare item goes on with the list of the clause before."""
    predicate = reading.listing
    if predicate is None:
        return None
    value = _clean(rest, _CUT_TOOL if predicate == "uses" else _CUT_THING)
    if (
        not value
        or len(value.split()) > 4
        or _NEGATED.search(value)
        or _DEICTIC.match(value)
        or (value[:1].islower() and _IMPERATIVES.match(value))
        or _PERSONAL.search(value)
    ):
        return None
    rule = next(rule for rule in _RULES if rule.predicate == predicate)
    if rule.check is not None and not rule.check(value):
        return None
    return reading.fact(predicate, value)


def _clause_facts(clause: str, *, joined: bool, first: bool, reading: _Reading) -> list[Fact]:
    """One clause's facts, its subject its own or, for "…, work at a bookshop", the one of the
    clause before (a sentence that opens without one, "Moved to Melbourne", is the user's)."""
    if _CLAUSE_GUARD.search(clause):
        reading.subject, reading.listing = None, None
        return []
    reading.first = first
    kind, relation, rest = _subject(clause, reading.state)
    if kind == "":
        if first and (_BARE_START.match(rest) or _AGE_BARE.match(rest) or _NAME_HERE.match(rest)):
            reading.subject, reading.relation = "user", None
        elif reading.subject is None or _IMPERATIVES.match(rest):
            reading.listing = None
            return []
    else:
        reading.subject, reading.relation = kind, relation
        if kind is None:
            reading.listing = None
            return []
    rest = _ADVERBS.sub("", rest, count=1)
    facts = _rule_facts(rest, reading)
    if facts is not None:
        return facts
    # A list goes on after "and"; after a comma only where its items are a closed vocabulary
    # ("bilingual, Spanish and English"): "I'm on Arch (sorry), kernel 6.9" lists nothing.
    comma_item = _COMMA_ITEMS.get(reading.listing or "")
    if kind == "" and (joined or (comma_item is not None and comma_item.fullmatch(rest.strip()))):
        item = _list_goes_on(rest, reading)
        if item is not None:
            return [item]
    reading.listing = None
    return []


def _field_facts(sentence: str) -> list[Fact] | None:
    """A sentence written as a form's field, "stack: TypeScript, React 18" or "hometown: Tromsø":
    one fact per item of the list after the label (None: the sentence is no such field)."""
    found = _FIELD.match(sentence)
    if found is None:
        return None
    predicate = next(
        predicate
        for predicate, label in _FIELDS
        if re.fullmatch(label, found.group("key"), re.IGNORECASE)
    )
    facts = []
    for part in re.split(r"\s*(?:,|\+|;|\band\b|&)\s*", found.group("v")):
        learning = re.search(r"\(\s*learning\b", part, re.IGNORECASE)
        value = _clean(re.sub(r"\([^)]*\)?", "", part), None)
        if not value or len(value.split()) > 5 or _NEGATED.search(value):
            continue
        check = _FIELD_CHECKS.get(predicate)
        if check is not None and not check(value):
            continue
        item = "studies" if predicate == "speaks" and learning else predicate
        facts.append(Fact("user", item, value, sentence))
    return facts


def _sentence_facts(sentence: str, state: _State) -> list[Fact]:
    sentence = _REPORTED.sub("", sentence).strip()
    guarded = bool(_SENTENCE_GUARD.search(sentence))
    facts = _mention_facts(sentence, state, guarded=guarded)
    if guarded:
        return facts
    fields = _field_facts(sentence)
    if fields is not None:
        return facts + fields
    found, sentence = _sentence_rule_facts(sentence)
    facts += found
    sentence = _COMPOUND.sub("we", sentence)
    facts += _pet_facts(sentence)
    reading = _Reading(sentence, state)
    if about := _ABOUT_ME.match(sentence):
        # "about me: 38, vegetarian, live in Utrecht": the list is the user's.
        sentence, reading.subject = sentence[about.end() :], "user"
    for index, (clause, joined) in enumerate(_split_clauses(sentence)):
        facts += _clause_facts(clause, joined=joined, first=index == 0, reading=reading)
    return facts


def facts_extract(*, text: str) -> list[Fact]:
    """The facts a user's turn states about the user and the user's people, in order, each
    once. Call it for the user's own turns only: an assistant's "I" is not the user."""
    state = _State()
    facts: list[Fact] = []
    seen: set[tuple[str, str, str]] = set()
    for raw in _SENTENCE.split(text):
        sentence = _QUOTED.sub(" ", _expand(raw)).strip()
        if not sentence:
            continue
        for fact in _sentence_facts(sentence, state):
            key = (fact.subject.casefold(), fact.predicate, fact.value.casefold())
            if key not in seen:
                seen.add(key)
                facts.append(Fact(fact.subject, fact.predicate, fact.value, raw.strip()))
    # "a horse, her name is Stella": the pet named is the one had, not a second one.
    named = {
        (fact.subject, fact.value.split(": ", 1)[0].casefold())
        for fact in facts
        if fact.predicate == "has_pet" and ": " in fact.value
    }
    return [
        fact
        for fact in facts
        if fact.predicate != "has_pet" or (fact.subject, fact.value.casefold()) not in named
    ]


# --- How a fact reads in a memory ------------------------------------------------------------

# Per predicate: a short title (the semantic memory's name) and the sentence it is stated in.
_PHRASES: dict[str, tuple[str, str]] = {
    "name": ("Name", "{subject} is called {value}."),
    "age": ("Age", "{subject} is {value} years old."),
    "lives_in": ("Lives in", "{subject} lives in {value}."),
    # Where the user moved is where they live: said so, a question about where they live finds it.
    "moved_to": ("Moved to", "{subject} moved to {value} and lives there."),
    "from": ("From", "{subject} is from {value}."),
    "works_as": ("Works as", "{subject} works as {value}."),
    "works_at": ("Works at", "{subject} works at {value}."),
    "studies": ("Studies", "{subject} studies {value}."),
    "likes": ("Likes", "{subject} likes {value}."),
    "dislikes": ("Dislikes", "{subject} dislikes {value}."),
    "prefers": ("Prefers", "{subject} prefers {value}."),
    "allergic_to": ("Allergic to", "{subject} is allergic to {value}."),
    "health_condition": ("Health", "{subject} has this condition: {value}."),
    "diet": ("Diet", "{subject} keeps this diet: {value}."),
    "has_pet": ("Pet", "{subject} has a pet: {value}."),
    "family": ("Family", "{subject}'s family: {value}."),
    "partner": ("Partner", "{subject}'s partner: {value}."),
    "owns": ("Owns", "{subject} owns {value}."),
    "uses": ("Uses", "{subject} uses {value}."),
    "switched_to": ("Switched to", "{subject} switched to {value}."),
    "no_longer": ("No longer", "{subject} no longer: {value}."),
    "plans": ("Plans", "{subject} plans: {value}."),
    "birthday": ("Birthday", "{subject}'s birthday: {value}."),
    "speaks": ("Speaks", "{subject} speaks {value}."),
    "hobby": ("Hobby", "{subject}'s hobby: {value}."),
}


def fact_title(*, fact: Fact, speaker: str) -> str:
    """A short name for the fact's memory: "Allergic to", "Maya (daughter): Plans"."""
    title = _PHRASES[fact.predicate][0]
    return title if fact.subject == "user" else f"{_who(fact.subject, speaker)}: {title}"


def fact_summary(*, fact: Fact, speaker: str) -> str:
    """The fact as a sentence, the user named ``speaker`` ("User", or the name they spoke
    under): "User is allergic to penicillin.", "Maya (daughter) starts school in September."."""
    subject = _who(fact.subject, speaker)
    value = fact.value
    phrase = _PHRASES[fact.predicate][1]
    if fact.predicate in ("family", "partner") and ": " in value:
        relation, name = value.split(": ", 1)
        phrase, subject, value = "{value} is {subject}'s " + relation + ".", speaker, name
    elif fact.predicate == "family":
        phrase = "{subject} has {value}."
    elif fact.predicate == "switched_to" and " -> " in value:
        old, value = value.split(" -> ", 1)
        phrase = "{subject} switched from " + old + " to {value}."
    elif fact.predicate == "plans":
        first = value.split(" ", 1)[0].lower()
        # "going to Japan", "starts school", "open-source the SDK": the verb as written.
        phrase = (
            "{subject} is {value}."
            if first.endswith("ing")
            else "{subject} {value}."
            if first.endswith("s")
            else "{subject} plans to {value}."
        )
    # Not str.format: the words are the user's and may hold braces.
    return phrase.replace("{subject}", subject).replace("{value}", value)


def _who(subject: str, speaker: str) -> str:
    return speaker if subject == "user" else subject
