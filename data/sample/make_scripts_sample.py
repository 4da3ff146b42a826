#!/usr/bin/env python3
"""Generate small Japanese, Chinese and Greek samples under data/sample/{ja,zh,el}/ (stdlib, fixed seed).

Customer messages about delivery, billing and accounts, assembled from hand-written
fragments: enough for the tests to train a tiny model end to end in scripts without
spaces between words (ja, zh) and a cased non-Latin script (el). Byte-identical on
every run.  Usage: python data/sample/make_scripts_sample.py
"""

import csv
import random
from pathlib import Path

SEED = 20261125
ROWS_PER_LABEL = 50
HERE = Path(__file__).resolve().parent

LANGS = {
    "ja": {
        "greet": ["こんにちは。", "お世話になっております。", "すみません、", "お問い合わせです。", ""],
        "close": [
            "よろしくお願いします。",
            "至急対応してください。",
            "ご確認ください。",
            "返信をお待ちしています。",
            "",
        ],
        "core": {
            "delivery": [
                "注文した荷物がまだ届いていません。",
                "配送状況が一週間も更新されていません。",
                "荷物が壊れた状態で届きました。",
                "配達先の住所を変更したいです。",
                "追跡番号を入力しても何も表示されません。",
                "宅配便が不在票を残さずに帰りました。",
            ],
            "billing": [
                "請求書の金額が間違っています。",
                "同じ注文で二回請求されました。",
                "返金がまだ口座に入っていません。",
                "領収書を発行してください。",
                "クレジットカードの引き落としが二重になっています。",
                "割引クーポンが適用されていません。",
            ],
            "account": [
                "パスワードを忘れてログインできません。",
                "メールアドレスを変更したいです。",
                "アカウントが突然ロックされました。",
                "退会の手続き方法を教えてください。",
                "二段階認証のコードが届きません。",
                "登録した電話番号を更新できません。",
            ],
        },
    },
    "zh": {
        "greet": ["你好，", "您好！", "客服你好，", "打扰一下，", ""],
        "close": ["谢谢。", "请尽快处理。", "麻烦你们了。", "等你们回复。", ""],
        "core": {
            "delivery": [
                "我的包裹到现在还没有送到。",
                "物流信息一周都没有更新。",
                "快递到的时候箱子已经破了。",
                "我想修改收货地址。",
                "快递单号查不到任何信息。",
                "快递员没打电话就把包裹放在门口了。",
            ],
            "billing": [
                "发票上的金额不对。",
                "同一个订单被扣了两次钱。",
                "退款到现在还没有到账。",
                "请帮我开一张发票。",
                "信用卡被重复扣款了。",
                "优惠券没有抵扣成功。",
            ],
            "account": [
                "忘记密码了，登录不了。",
                "我想换绑邮箱。",
                "账号突然被冻结了。",
                "请问怎么注销账号？",
                "收不到短信验证码。",
                "绑定的手机号改不了。",
            ],
        },
    },
    "el": {
        "greet": ["Καλημέρα,", "Γεια σας,", "ΚΑΛΗΣΠΕΡΑ,", "Αγαπητή ομάδα,", ""],
        "close": ["Ευχαριστώ.", "Παρακαλώ απαντήστε ΑΜΕΣΑ.", "Με εκτίμηση, Μαρία.", "Περιμένω την απάντησή σας.", ""],
        "core": {
            "delivery": [
                "Η παραγγελία μου δεν έχει φτάσει ακόμα.",
                "Το δέμα ήρθε ΣΠΑΣΜΕΝΟ.",
                "Ο κωδικός αποστολής δεν δείχνει τίποτα.",
                "Θέλω να αλλάξω τη διεύθυνση παράδοσης.",
                "Ο Κούριερ δεν άφησε ειδοποίηση.",
                "Η αποστολή καθυστερεί μία εβδομάδα.",
            ],
            "billing": [
                "Το ποσό στο τιμολόγιο είναι λάθος.",
                "Με χρεώσατε ΔΥΟ φορές για την ίδια παραγγελία.",
                "Η επιστροφή χρημάτων δεν έχει γίνει.",
                "Χρειάζομαι απόδειξη για την Αγορά.",
                "Η κάρτα μου χρεώθηκε διπλά.",
                "Το κουπόνι έκπτωσης δεν εφαρμόστηκε.",
            ],
            "account": [
                "Ξέχασα τον κωδικό μου και δεν μπορώ να συνδεθώ.",
                "Θέλω να αλλάξω το Email μου.",
                "Ο λογαριασμός μου ΚΛΕΙΔΩΘΗΚΕ.",
                "Πώς διαγράφω τον λογαριασμό μου;",
                "Δεν λαμβάνω τον κωδικό επαλήθευσης.",
                "Δεν μπορώ να ενημερώσω το τηλέφωνό μου.",
            ],
        },
    },
}


def message(rng: random.Random, spec: dict, label: str, sep: str) -> str:
    parts = [rng.choice(spec["greet"]), rng.choice(spec["core"][label])]
    if rng.random() < 0.4:
        parts.append(rng.choice(spec["core"][label]))
    parts.append(rng.choice(spec["close"]))
    return sep.join(p for p in parts if p)


def main() -> None:
    for lang, spec in LANGS.items():
        rng = random.Random(f"{SEED}-{lang}")
        sep = " " if lang == "el" else ""
        rows = [(message(rng, spec, label, sep), label) for label in spec["core"] for _ in range(ROWS_PER_LABEL)]
        rng.shuffle(rows)
        out = HERE / lang / "train.csv"
        out.parent.mkdir(exist_ok=True)
        with out.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["text", "labels"])
            writer.writerows(rows)


if __name__ == "__main__":
    main()
