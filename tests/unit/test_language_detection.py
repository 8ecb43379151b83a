"""Language detection (``ingest.language``) of the languages PostgreSQL stems beyond the first
fifteen, and of their neighbours, which must keep what they were read as."""

from __future__ import annotations

import pytest

from kb_retriever.ingest.language import detect_language

METERS = {
    "ro": "Serverele trimit măsurătorile în sistem în fiecare noapte, iar dacă un contor nu "
          "răspunde, operatorul de serviciu trebuie să verifice jurnalul și să repornească "
          "poarta. Această procedură este descrisă pentru toate stațiile.",
    "id": "Server mengirimkan data pengukuran ke sistem setiap malam, dan jika sebuah meteran "
          "tidak merespons, operator yang bertugas harus memeriksa log dan memulai ulang "
          "gateway. Prosedur ini berlaku untuk semua stasiun.",
    "lt": "Serveriai kiekvieną naktį siunčia matavimus į sistemą, o jei skaitiklis neatsako, "
          "budintis operatorius turi patikrinti žurnalą ir iš naujo paleisti šliuzą. Ši "
          "procedūra galioja visoms stotims, kai jos yra prijungtos.",
    "el": "Οι διακομιστές αποστέλλουν τις μετρήσεις στο σύστημα κάθε νύχτα, και αν ένας "
          "μετρητής δεν απαντά, ο χειριστής βάρδιας πρέπει να ελέγξει το αρχείο καταγραφής.",
    "ar": "ترسل الخوادم القياسات إلى النظام كل ليلة، وإذا لم يستجب أحد العدادات، يجب على "
          "المشغل المناوب أن يفحص السجل ثم يعيد تشغيل البوابة. هذا الإجراء صالح لكل المحطات.",
    "hi": "सर्वर हर रात माप को सिस्टम में भेजते हैं, और अगर कोई मीटर जवाब नहीं देता है, तो "
          "ड्यूटी पर मौजूद ऑपरेटर को लॉग देखना होता है। यह प्रक्रिया सभी स्टेशनों के लिए है।",
    "ne": "सर्भरहरूले हरेक रात मापन प्रणालीमा पठाउँछन्, र यदि कुनै मिटरले जवाफ दिँदैन भने "
          "ड्युटीमा रहेको अपरेटरले लग हेर्नुपर्छ। यो प्रक्रिया सबै स्टेशनहरूको लागि लागू हुन्छ।",
    "ta": "சேவையகங்கள் ஒவ்வொரு இரவும் அளவீடுகளை அமைப்புக்கு அனுப்புகின்றன, ஒரு மீட்டர் "
          "பதிலளிக்கவில்லை என்றால், பணியில் உள்ள இயக்குநர் பதிவைச் சரிபார்க்க வேண்டும்.",
    "hy": "Սերվերները ամեն գիշեր չափումները ուղարկում են համակարգ, և եթե հաշվիչը չի "
          "պատասխանում, հերթապահ օպերատորը պետք է ստուգի մատյանը։",
    # Catalan writes Spanish's commonest words ("de", "la", "el", "que", "en"): it was read as
    # Spanish, or as none.
    "ca": "Els servidors envien les mesures al sistema cada nit, i si un comptador no respon, "
          "l'operador de guàrdia ha de revisar el registre i tornar a engegar la passarel·la. "
          "Aquest procediment és vàlid per a totes les estacions.",
    "sr": "Сервери сваке ноћи шаљу мерења у систем, а ако бројило не одговара, дежурни "
          "оператер треба да провери дневник и поново покрене мрежни пролаз. Ова процедура "
          "важи за све станице које су повезане.",
}

# Languages that share a script or words with those above, read as before: Bulgarian as
# Russian (their stop words), Persian, Urdu, Marathi, Macedonian and Croatian as none, an
# English text with Greek letters in its formulas as English, Turkish (ş) as Turkish. Vietnamese,
# which writes Romanian's ă, is Vietnamese (it was none; it has no configuration either way).
NEIGHBOURS = {
    "Сървърите изпращат измерванията към системата всяка нощ и ако някой брояч не отговаря, "
    "дежурният оператор трябва да провери дневника и да рестартира шлюза.": "ru",
    "سرورها هر شب اندازه‌گیری‌ها را به سامانه می‌فرستند و اگر یک کنتور پاسخ ندهد، اپراتور "
    "کشیک باید گزارش را بررسی کند و دروازه را دوباره راه‌اندازی کند.": None,
    "سرور ہر رات پیمائشیں سسٹم کو بھیجتے ہیں، اور اگر کوئی میٹر جواب نہیں دیتا تو ڈیوٹی پر "
    "موجود آپریٹر کو لاگ دیکھنا ہوتا ہے۔": None,
    "सर्व्हर दररोज रात्री मोजमाप प्रणालीकडे पाठवतात आणि जर एखादे मीटर प्रतिसाद देत नसेल तर "
    "ड्युटीवरील ऑपरेटरने लॉग तपासणे आवश्यक आहे.": None,
    "Серверите секоја ноќ ги испраќаат мерењата во системот, и ако некое броило не одговара, "
    "дежурниот оператор треба да го провери дневникот.": None,
    "Sustav za naplatu šalje račune svaki dan, a što je važno, računi su u PDF-u i šalju se "
    "e-poštom kupcima čim je narudžba plaćena.": None,
    "The model predicts latency with a weight α and a decay λ, and the μ parameter sets the "
    "mean; we tuned α and λ on the last week of data and kept μ at 0.3 for all of the "
    "services.": "en",
    "Sunucular ölçümleri her gece sisteme gönderir ve bir sayaç yanıt vermezse, nöbetçi "
    "operatör günlüğü kontrol etmeli ve ağ geçidini yeniden başlatmalıdır. Bu işlem tüm "
    "istasyonlar için geçerlidir.": "tr",
    "Los servidores envían las mediciones al sistema cada noche, y si un contador no responde, "
    "el operador de guardia debe revisar el registro. Este procedimiento es válido para todas "
    "las estaciones, y este equipo lo revisa.": "es",
    "Các máy chủ gửi số đo về hệ thống mỗi đêm, và nếu một đồng hồ không phản hồi, người vận "
    "hành trực ca phải kiểm tra nhật ký và khởi động lại cổng.": "vi",
    # Spanish that names Catalan bodies stays Spanish; Italian, which writes Catalan's "però",
    # stays Italian; Galician and Occitan stay as they were read (Portuguese, Spanish).
    "El equipo de Barcelona revisa cada noche el registro del servidor de la Generalitat, y si "
    "la Agència Catalana de Ciberseguretat o els Mossos piden datos, se los envía el "
    "responsable.": "es",
    "I server inviano le misure al sistema ogni notte, e se un contatore non risponde, "
    "l'operatore di turno deve controllare il registro; però la procedura vale per tutte le "
    "stazioni.": "it",
    "Os servidores envían as medicións ao sistema cada noite, e se un contador non responde, o "
    "operador de garda debe revisar o rexistro. Este procedemento é válido para todas as "
    "estacións.": "pt",
    "Los servidors mandan las mesuras al sistèma cada nuèch, e se un comptador respond pas, "
    "l'operator de garda deu verificar lo registre. Aqueste procediment es valid per totas "
    "las estacions.": "es",
}


@pytest.mark.parametrize("code", sorted(METERS))
def test_a_language_postgresql_stems_is_detected(code: str) -> None:
    assert detect_language(METERS[code]) == code


@pytest.mark.parametrize(("text", "code"), list(NEIGHBOURS.items()),
                         ids=["bg", "fa", "ur", "mr", "mk", "hr", "en-formulas", "tr", "es", "vi",
                              "es-naming-catalan", "it", "gl", "oc"])
def test_a_neighbour_keeps_what_it_was_read_as(text: str, code: str | None) -> None:
    assert detect_language(text) == code


# Text in Chinese, Japanese or Korean that names products in English (or holds a few Latin
# letters that Portuguese's one-letter words match): read as no language (parser version 11).
# A Japanese decision of kojo-ja was English, and a Chinese runbook of zh-factory Portuguese.
UNSPACED = [
    "基幹システムを SAP S/4HANA Cloud へ移行する。業務を標準機能に合わせる Fit to Standard を"
    "原則とし、アドオンは千三百八十本から二百十本に減らす。ログインは全社の Single Sign-On and "
    "MFA に統合する。旧システムは参照専用として来年三月末まで残し、現行システムをそのまま載せ"
    "替える Lift and Shift 案は却下した。データは Export to S3 で書き出してから廃棄する。",
    "标签打印服务报错 LBL-E-101、LBL-E-102 或 LBL-E-203 时，先查 MES 里的物料号；报 LBL-E-204 "
    "或 LBL-E-305 时，重启打印服务。",
    "라벨 인쇄 서비스가 LBL-E-101, LBL-E-102, LBL-E-203 오류를 내면 MES 의 품번을 확인하고, "
    "LBL-E-204 나 LBL-E-305 이면 서비스를 다시 시작한다.",
]


@pytest.mark.parametrize("text", UNSPACED, ids=["ja", "zh", "ko"])
def test_chinese_japanese_or_korean_with_latin_words_has_no_language(text: str) -> None:
    assert detect_language(text) is None
