"""Writes set.jsonl, the labelled PII set that bench/pii_eval.py scores (run it to rebuild).

Written before the detector was tuned, from values of real formats: phone numbers as each country
prints them (national and international), IBANs and card numbers whose check digits are computed
here, and near-misses that must not match. Every fourth record is held out (`split`: `heldout`):
the detector was never tuned on those. The `fresh` records were written by hand after tuning, in
other phrasings, and are scored as they came. Secrets are random strings of each vendor's shape, not real
keys. Deterministic: the same file every run.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

HERE = Path(__file__).resolve().parent
rng = random.Random(33)


def luhn_complete(prefix: str, length: int) -> str:
    """``prefix`` padded with random digits to ``length``, the last one the Luhn check digit."""
    body = prefix + "".join(rng.choice(string.digits) for _ in range(length - len(prefix) - 1))
    for check in string.digits:
        digits = body + check
        total = sum(
            (int(c) * 2 - 9 if int(c) * 2 > 9 else int(c) * 2) if i % 2 else int(c)
            for i, c in enumerate(reversed(digits))
        )
        if total % 10 == 0:
            return digits
    raise AssertionError


def iban_complete(country: str, bban: str) -> str:
    """The IBAN of ``bban`` in ``country`` with its mod-97 check digits."""
    number = int("".join(str(int(c, 36)) for c in bban + country + "00"))
    return f"{country}{98 - number % 97:02d}{bban}"


def group(value: str, sizes: list[int], sep: str) -> str:
    parts, index = [], 0
    for size in sizes:
        parts.append(value[index : index + size])
        index += size
    if index < len(value):
        parts.append(value[index:])
    return sep.join(p for p in parts if p)


def spaced4(value: str) -> str:
    return " ".join(value[i : i + 4] for i in range(0, len(value), 4))


records: list[dict] = []


def add(text: str, *entities: tuple[str, str], note: str = "") -> None:
    for _, value in entities:
        assert value in text, (value, text)
    records.append({"text": text, "entities": [{"kind": k, "value": v} for k, v in entities], "note": note})


# --- phone numbers: 14 countries, national and international formats -----------------------------
PHONES = [
    ("US", "(212) 736-5000"), ("US", "+1 212-736-5000"), ("US", "212.736.5000"), ("US", "+1 (650) 253-0000"),
    ("US", "415-555-2671"), ("US", "1-800-275-2273"), ("US", "+1 646 555 3890"),
    ("GB", "020 7946 0958"), ("GB", "+44 20 7946 0958"), ("GB", "07700 900123"), ("GB", "+44 7911 123456"),
    ("GB", "0121 496 0345"), ("GB", "+44 (0)161 496 0011"),
    ("DE", "030 12345678"), ("DE", "+49 30 12345678"), ("DE", "0151 23456789"), ("DE", "+49 89 1234567"),
    ("DE", "(0221) 4567890"), ("DE", "+49 (0)40 428280"),
    ("FR", "01 23 45 67 89"), ("FR", "+33 1 23 45 67 89"), ("FR", "06 12 34 56 78"), ("FR", "+33 6 12 34 56 78"),
    ("FR", "04.72.12.34.56"),
    ("IT", "06 1234 5678"), ("IT", "+39 06 1234 5678"), ("IT", "347 123 4567"), ("IT", "+39 347 123 4567"),
    ("ES", "912 34 56 78"), ("ES", "+34 912 345 678"), ("ES", "612 34 56 78"), ("ES", "+34 612345678"),
    ("NL", "020 123 4567"), ("NL", "+31 20 123 4567"), ("NL", "06 12345678"), ("NL", "+31 6 12345678"),
    ("IN", "+91 98765 43210"), ("IN", "098765 43210"), ("IN", "022 2345 6789"), ("IN", "+91 22 2345 6789"),
    ("JP", "03-1234-5678"), ("JP", "+81 3-1234-5678"), ("JP", "090-1234-5678"), ("JP", "+81 90 1234 5678"),
    ("AU", "(02) 9876 5432"), ("AU", "+61 2 9876 5432"), ("AU", "0412 345 678"), ("AU", "+61 412 345 678"),
    ("BR", "(11) 91234-5678"), ("BR", "+55 11 91234-5678"), ("BR", "(21) 2345-6789"), ("BR", "+55 21 2345 6789"),
    ("IE", "+353 1 234 5678"), ("SE", "+46 8 123 456 78"), ("CH", "+41 44 668 18 00"), ("CN", "+86 10 6552 9988"),
    ("ZA", "+27 21 123 4567"), ("MX", "+52 55 1234 5678"), ("KR", "+82 2-312-3456"),
]  # fmt: skip
PHONE_TEMPLATES = [
    "Call me on {} tomorrow.", "Phone: {}", "You can reach the front desk at {} during office hours.",
    "Tel. {} (ask for Maria)", "My number is {}, text first please.", "Contact: Jan Smit, {}",
]  # fmt: skip
for index, (_, number) in enumerate(PHONES):
    add(PHONE_TEMPLATES[index % len(PHONE_TEMPLATES)].format(number), ("phone", number))

# --- e-mail addresses -----------------------------------------------------------------------------
EMAILS = [
    "john.doe@example.com", "jane+newsletter@gmail.com", "first.last+tag@sub.mail.example.co.uk",
    "ops-team@corp.example.org", "a@b.io", "user_name@example-domain.de", "o'connor@example.ie",
    "x.y.z@mail.server.example.net", "billing+2024-05@shop.example.fr", "jörg.müller@beispiel.de",
    "info@münchen.de", "support@xn--mnchen-3ya.de", "Maria.Garcia@Empresa.ES", "dev+ci.build@github.example.com",
    "123456@qq.com", "no-reply@notifications.example.app", "sales@例え.jp", "j.smith@university.ac.uk",
    "root+alerts@host1.dc2.example.com", "people%team@example.com",
]  # fmt: skip
EMAIL_TEMPLATES = [
    "Write to {} for details.", "From: {}", "cc {} and the rest of the team", "<{}>", "email me at {}.",
    "Contact ({}) before Friday",
]  # fmt: skip
for index, email in enumerate(EMAILS):
    add(EMAIL_TEMPLATES[index % len(EMAIL_TEMPLATES)].format(email), ("email", email))

# --- card numbers: seven networks, with and without separators -----------------------------------
CARDS = [
    ("visa", "4111111111111111"), ("visa", "4012888888881881"), ("visa", "4222222222222"),
    ("visa", luhn_complete("4", 16)), ("visa", luhn_complete("4", 19)), ("visa", luhn_complete("49", 16)),
    ("mastercard", "5555555555554444"), ("mastercard", "5105105105105100"), ("mastercard", "2223003122003222"),
    ("mastercard", luhn_complete("2720", 16)), ("mastercard", luhn_complete("53", 16)),
    ("amex", "378282246310005"), ("amex", "371449635398431"), ("amex", luhn_complete("34", 15)),
    ("discover", "6011111111111117"), ("discover", "6011000990139424"), ("discover", luhn_complete("65", 16)),
    ("discover", luhn_complete("644", 16)),
    ("jcb", "3530111333300000"), ("jcb", "3566002020360505"), ("jcb", luhn_complete("3589", 16)),
    ("diners", "30569309025904"), ("diners", "38520000023237"), ("diners", "36227206271667"),
    ("unionpay", "6200000000000005"), ("unionpay", luhn_complete("62", 19)), ("unionpay", luhn_complete("6250", 16)),
]  # fmt: skip
CARD_TEMPLATES = [
    "Card number: {}", "Please charge {} for the order.", "my visa is {} exp 04/27", "cc={}&amount=12",
    "Pay with {} (the company card).",
]  # fmt: skip


def card_formats(network: str, digits: str) -> list[str]:
    if network == "amex":
        sizes = [4, 6, 5]
    elif network == "diners" and len(digits) == 14:
        sizes = [4, 6, 4]
    else:
        sizes = [4] * 5
    return [digits, group(digits, sizes, " "), group(digits, sizes, "-")]


for index, (network, digits) in enumerate(CARDS):
    for form_index, form in enumerate(card_formats(network, digits)):
        template = CARD_TEMPLATES[(index + form_index) % len(CARD_TEMPLATES)]
        add(template.format(form), ("credit_card", form), note=network)

# --- IBANs: 16 countries, compact and printed in groups of four ----------------------------------
IBANS = [
    "DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606", "ES9121000418450200051332",
    "IT60X0542811101000000123456", "NL91ABNA0417164300", "BE68539007547034", "CH9300762011623852957",
    "AT611904300234573201", "PL61109010140000071219812874", "SE4550000000058398257466", "NO9386011117947",
    "DK5000400440116243", "FI2112345600000785", "PT50000201231234567890154", "IE29AIBK93115212345678",
    iban_complete("DE", "".join(rng.choice(string.digits) for _ in range(18))),
    iban_complete("GB", "NWBK" + "".join(rng.choice(string.digits) for _ in range(14))),
]  # fmt: skip
IBAN_TEMPLATES = ["IBAN: {}", "Please wire the deposit to {} by Monday.", "Bankverbindung {}, BIC COBADEFFXXX"]
for index, iban in enumerate(IBANS):
    for form_index, form in enumerate((iban, spaced4(iban))):
        add(IBAN_TEMPLATES[(index + form_index) % 3].format(form), ("iban", form))

# --- US social security numbers -------------------------------------------------------------------
SSNS = ["078-05-1120", "219-09-9999", "123-45-6789", "536-22-8145", "001-01-0001", "665-99-9998", "899-12-3456"]
for _ in range(8):
    area = rng.choice([a for a in range(1, 900) if a != 666])
    SSNS.append(f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}")
SSN_TEMPLATES = ["SSN: {}", "social security number {} on file", "Employee (SSN {}) started Monday"]
for index, ssn in enumerate(SSNS):
    add(SSN_TEMPLATES[index % 3].format(ssn), ("us_ssn", ssn))
add("SSN 078 05 1120 as printed on the card", ("us_ssn", "078 05 1120"))

# --- IP addresses ---------------------------------------------------------------------------------
IPS = [
    "192.168.1.10", "10.0.0.1", "172.16.254.3", "8.8.8.8", "203.0.113.195", "255.255.255.0", "127.0.0.1",
    "2001:db8::8a2e:370:7334", "2001:0db8:0000:0000:0000:ff00:0042:8329", "::1", "fe80::1ff:fe23:4567:890a",
    "2606:4700:4700::1111", "::ffff:192.0.2.128", "2001:DB8:85A3::8A2E:370:7334", "ff02::2", "2a00:1450:4001:82a::200e",
]  # fmt: skip
IP_TEMPLATES = ["The server is at {}.", "ssh admin@{}", "Blocked requests from {} after 5 failures", "host={}"]
for index, ip in enumerate(IPS):
    text = IP_TEMPLATES[index % 4].format(ip)
    add(text, ("ip_address", ip))

# --- secrets: random strings of each vendor's shape ------------------------------------------------


def rand(alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
SECRETS = [
    "sk-" + rand(ALNUM, 48), "sk-proj-" + rand(B64URL, 100), "sk-svcacct-" + rand(B64URL, 60),
    "AKIAIOSFODNN7EXAMPLE", "AKIA" + rand(string.ascii_uppercase + string.digits, 16),
    "ASIA" + rand(string.ascii_uppercase + string.digits, 16),
    "ghp_" + rand(ALNUM, 36), "gho_" + rand(ALNUM, 36), "github_pat_" + rand(ALNUM, 22) + "_" + rand(ALNUM, 59),
    "xoxb-" + rand(string.digits, 11) + "-" + rand(string.digits, 13) + "-" + rand(ALNUM, 24),
    "xoxp-" + rand(string.digits, 12) + "-" + rand(string.digits, 12) + "-" + rand(ALNUM, 32),
    "AIza" + rand(B64URL, 35), "AIza" + rand(B64URL, 35),
    "sk_live_" + rand(ALNUM, 24), "rk_live_" + rand(ALNUM, 24), "sk_test_" + rand(ALNUM, 24),
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
    + rand(B64URL, 43),
    "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJodHRwczovL2F1dGguZXhhbXBsZS5jb20iLCJleHAiOjE3MDAwMDAwMDB9." + rand(B64URL, 342),
    "-----BEGIN RSA PRIVATE KEY-----", "-----BEGIN PRIVATE KEY-----", "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----",
]  # fmt: skip
SECRET_TEMPLATES = ["OPENAI_API_KEY={}", "here is my key: {} (don't share)", 'token = "{}"', "{}\nMIIEpAIBAAKCAQEA"]
for index, secret in enumerate(SECRETS):
    template = SECRET_TEMPLATES[3] if secret.startswith("-----") else SECRET_TEMPLATES[index % 3]
    add(template.format(secret), ("secret", secret))

# --- several kinds in one text --------------------------------------------------------------------
add(
    "Hi, I'm Anna (anna.k+shop@example.com, +49 30 12345678). Refund to DE89 3704 0044 0532 0130 00 please.",
    ("email", "anna.k+shop@example.com"), ("phone", "+49 30 12345678"), ("iban", "DE89 3704 0044 0532 0130 00"),
)
add(
    "Customer 4111-1111-1111-1111 called from 415-555-2671 about SSN 078-05-1120; logged from 10.20.30.40.",
    ("credit_card", "4111-1111-1111-1111"), ("phone", "415-555-2671"), ("us_ssn", "078-05-1120"),
    ("ip_address", "10.20.30.40"),
)
add(
    "deploy: AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE host 2001:db8::1 owner ops@example.org",
    ("secret", "AKIAIOSFODNN7EXAMPLE"), ("ip_address", "2001:db8::1"), ("email", "ops@example.org"),
)
add(
    "Pay 5555 5555 5555 4444 or wire GB82 WEST 1234 5698 7654 32; questions to +44 20 7946 0958.",
    ("credit_card", "5555 5555 5555 4444"), ("iban", "GB82 WEST 1234 5698 7654 32"), ("phone", "+44 20 7946 0958"),
)
add(
    "Two mails: a.b@example.com,c.d@example.net; two IPs 1.1.1.1/8.8.4.4",
    ("email", "a.b@example.com"), ("email", "c.d@example.net"), ("ip_address", "1.1.1.1"), ("ip_address", "8.8.4.4"),
)

# --- near-misses: nothing in these must match ------------------------------------------------------
NEAR_MISSES = [
    # order and reference numbers
    "Order #100234987 has shipped.", "Your order number is 4820-1937-55.", "Invoice INV-2024-000183 is due.",
    "Ticket 58213 was closed.", "Reference: 20240517-0042", "Tracking number 1Z999AA10123456784",
    "Customer ID 987654321", "PO 7731-22-9", "Case #2024-118-4471 opened", "Account 00012345 (internal)",
    # ISBN-10 and ISBN-13
    "ISBN 0-306-40615-2", "ISBN-13: 978-0-306-40615-7", "ISBN 9780306406157", "isbn 978-3-16-148410-0",
    "ISBN 0-19-852663-6 (paperback)", "ISBN 978-1-4028-9462-6",
    # dates and times
    "Meeting on 2024-05-17 at 14:30.", "Born 17/05/1984.", "Due 05.17.2024", "Start: 17.05.2024 09:00",
    "Timestamp 2024-05-17T14:30:00Z", "The shift runs 9:00-17:30.", "at 12:30:45 UTC", "Date: 2023/12/31 23:59:59",
    "from 01.01.2020 until 31.12.2025", "Q3 2024 (2024-07-01 to 2024-09-30)",
    # version strings
    "Upgrade to v1.2.3 now.", "Python 3.11.4 is installed.", "version 1.2.3.4", "release 2.0.0-rc.1",
    "Chrome 120.0.6099.109", "build 10.0.19045.3803", "ver. 4.3.2.1 of the firmware", "v10.2.0.5 changelog",
    "firmware 1.0.0.12", "node 18.17.1 and npm 9.6.7",
    # card-like numbers with a bad Luhn digit, and wrong lengths
    "Card 4111 1111 1111 1112 was declined.", "4012888888881882", "5555-5555-5555-4445", "378282246310006",
    "6011 1111 1111 1118", "card no 1234 5678 9012 3456", "0000 0000 0000 0000", "4111 1111 1111 111",
    # IBANs with a wrong check, wrong length or unknown country
    "IBAN DE89370400440532013001", "GB82WEST12345698765433", "FR1420041010050500013M02607",
    "NL91ABNA0417164301", "DE8937040044053201300", "XX89370400440532013000", "IBAN ES91 2100 0418 4502 0005 1333",
    # SSNs in invalid ranges
    "SSN 000-12-3456", "SSN 666-12-3456", "SSN 912-34-5678", "123-00-4567", "123-45-0000",
    # UUIDs, hashes, hex
    "request 550e8400-e29b-41d4-a716-446655440000 failed", "id=3f2504e0-4f89-11d3-9a0c-0305e82c3301",
    "sha1 da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "commit 83677fa", "color #ff8800", "MAC 00:1A:2B:3C:4D:5E", "0xdeadbeef at address 0x7ffd5e8c",
    # prices, quantities, coordinates
    "Total: $1,299.99", "Preis: 2.499,00 EUR", "It costs €1.234.567,89", "population 8,336,817",
    "coordinates 48.8566, 2.3522", "weight 12.5kg, 3.2.1 liftoff", "5,000,000 rows in 12.34 s",
    # postcodes and addresses
    "SW1A 1AA London", "10115 Berlin", "Beverly Hills, CA 90210", "75008 Paris", "1012 AB Amsterdam",
    "Tokyo 100-0001", "Flat 4, 221B Baker Street",
    # e-mail-like text that is not an address
    "user@localhost", "john at example dot com", "follow @inferd_bot", "icon@2x", "name@", "@example.com",
    # phone-like text that is not a number
    "Call extension 4412.", "room 1204", "page 12-15", "chapter 3.4.1", "score 3-1", "ratio 16:9",
    "code 123456", "PIN 0000",
    # IP-like text that is not an address
    "1.2.3", "256.1.1.1", "1.2.3.4.5", "C++ std::vector", "a::b::c", "300.300.300.300",
    # secret-like text that is not a key
    "sk-learn is a library", "the sk-prefix-naming-convention-is-documented-here", "AKIA is a prefix",
    "ghp_ tokens start like this", "eyJhbGciOiJIUzI1NiJ9 alone is a header", "-----BEGIN CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----", "xoxb- followed by nothing", "api_key=REDACTED",
]  # fmt: skip
for text in NEAR_MISSES:
    add(text, note="near-miss")

for index, record in enumerate(records):
    record["id"] = index
    record["split"] = "heldout" if index % 4 == 3 else "tune"

# --- fresh: written by hand after tuning, in other phrasings, and scored as they came -------------
FRESH: list[tuple[str, list[tuple[str, str]]]] = [
    ("Ring the Dublin office: +353 (0)1 677 0095 or mobile 087 123 4567.",
     [("phone", "+353 (0)1 677 0095"), ("phone", "087 123 4567")]),  # Irish national: not a default region
    ("Neue Nummer ab Montag: 0171 9876543 (privat), Büro 089 / 2180 0",
     [("phone", "0171 9876543"), ("phone", "089 / 2180 0")]),
    ("appelez le 01.45.67.89.10 ou le +33 (0)6 98 76 54 32", [("phone", "01.45.67.89.10"), ("phone", "+33 (0)6 98 76 54 32")]),
    ("US support: 1 (888) 452-1505 ext. 4", [("phone", "1 (888) 452-1505")]),
    ("whatsapp +55 (21) 98765-4321 pls", [("phone", "+55 (21) 98765-4321")]),
    ("Tokyo HQ +81-3-3224-9999", [("phone", "+81-3-3224-9999")]),
    ("Send invoices to accounts.payable+vendor-17@finance.example-group.com thanks",
     [("email", "accounts.payable+vendor-17@finance.example-group.com")]),
    ("Reply-To: \"Ops\" <ops.oncall@eu-west.internal.example.io>", [("email", "ops.oncall@eu-west.internal.example.io")]),
    ("Mailto:priya.r@iitb.ac.in;cc:t.nguyen@example.vn", [("email", "priya.r@iitb.ac.in"), ("email", "t.nguyen@example.vn")]),
    ("pay by amex 3782 822463 10005 please", [("credit_card", "3782 822463 10005")]),
    ("CARD:5105-1051-0510-5100 EXP:11/26 CVC:123", [("credit_card", "5105-1051-0510-5100")]),
    ("visa ending ...1111 (full 4012 8888 8888 1881)", [("credit_card", "4012 8888 8888 1881")]),
    ("Überweisung an AT61 1904 3002 3457 3201, Verwendungszweck 2024-117", [("iban", "AT61 1904 3002 3457 3201")]),
    ("IBAN:BE68539007547034.", [("iban", "BE68539007547034")]),
    ("rekening NL91 ABNA 0417 1643 00 t.n.v. J. de Vries", [("iban", "NL91 ABNA 0417 1643 00")]),
    ("my ssn is 536-22-8145 and dob 04/12/1979", [("us_ssn", "536-22-8145")]),
    ("[2026-11-27 10:01:22] 401 from 198.51.100.23 (ua curl/8.4.0)", [("ip_address", "198.51.100.23")]),
    ("listen [::]:8080 and [2001:db8:1::5]:443", [("ip_address", "::"), ("ip_address", "2001:db8:1::5")]),
    ("bind 0.0.0.0 port 5432", [("ip_address", "0.0.0.0")]),
    ("export GITHUB_TOKEN=ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", [("secret", "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")]),
    ("curl -H 'Authorization: Bearer sk-" + "Xy7Qp2Lm9Nv4Rt6Ws8Ka1Bd3Fg5Hj0Zc2Ve4Tu6Io8Pa1Sd3" + "'",
     [("secret", "sk-Xy7Qp2Lm9Nv4Rt6Ws8Ka1Bd3Fg5Hj0Zc2Ve4Tu6Io8Pa1Sd3")]),
    ("Flight LH 2024 departs 17:45 from gate B12", []),
    ("The part number is 0451-203-117 (Bosch)", []),
    ("see RFC 7231 section 6.5.1 and RFC 9110", []),
    ("ISBN-10 3-598-21508-8, ISBN-13 978-3-598-21508-5", []),
    ("Latitude 40.7128, longitude -74.0060", []),
    ("Kernel 6.8.0-45-generic on Ubuntu 24.04.1", []),
    ("Your verification code is 482 913.", []),
    ("Total 1.234.567 units shipped in 2023", []),
    ("Call the function foo::bar::baz() twice", []),
    ("IBAN DE00 1234 5678 9012 3456 78 is an example with a wrong check", []),
    ("test card 4242 4242 4242 4241 (bad check digit)", []),
    ("docs at https://example.com/v2/users/123456789/orders", []),
    ("Wait 10-15 minutes, then retry 3 times", []),
    ("dimensions 1920x1080, 60 Hz, 27 inch", []),
    ("sha512 cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce", []),
]  # fmt: skip
for text, entities in FRESH:
    add(text, *entities, note="fresh" if entities else "fresh near-miss")
    records[-1]["id"] = len(records) - 1
    records[-1]["split"] = "fresh"

with open(HERE / "set.jsonl", "w", encoding="utf-8") as out:
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
print(f"{len(records)} records, {sum(r['split'] == 'heldout' for r in records)} held out")
