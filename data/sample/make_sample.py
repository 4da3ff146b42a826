#!/usr/bin/env python3
"""Generate the synthetic sample data under data/sample/ (stdlib only, fixed seed).

Messages are assembled from hand-written fragments (greetings, label-specific
requests and details, closings, product names, order numbers). Output is
byte-identical on every run.  Usage: python data/sample/make_sample.py
"""

import csv
import random
from collections import Counter
from pathlib import Path

SEED = 20240611
HERE = Path(__file__).resolve().parent


def P(block):
    """Split a '|'-separated block of fragments into a clean list."""
    return [" ".join(x.split()) for x in block.split("|") if x.strip()]


FR = {
    "labels": ["livraison", "facturation", "produit", "compte"],
    "greet": P("""Bonjour, | Bonjour, | Bonjour madame, monsieur, | Bonsoir, | Salut, | Madame, Monsieur, | Hello, | Bonjour à toute l'équipe, | Re-bonjour, |
        Bonjour le service client, | Coucou, |"""),
    "close": P("""Merci d'avance. | Cordialement, {n}. | Bien cordialement. | Merci de votre retour rapide. | Dans l'attente de votre réponse. | Merci ! |
        Bonne journée. | Cdlt, {n} | Je compte sur vous. | Merci beaucoup pour votre aide. | Sincères salutations, {n}. | Merci de me tenir au courant. |
        Bonne soirée et merci. | {n} |"""),
    "names": P(
        "Julie | Marc | Sophie Durand | Karim | Nathalie | Thomas Bernard | Amélie | Hélène | Jérôme | François | Léa | Mme Lefèvre"
    ),
    "emails": P(
        "julie.martin@gmail.com | k.benali@orange.fr | thomas.b@free.fr | helene.roux@laposte.net | amelie92@hotmail.fr"
    ),
    "products": P("""la veste imperméable | le mixeur plongeant | les baskets en toile | la lampe de chevet | le sac à dos | la cafetière italienne |
        le pull en laine | la robe d'été | les écouteurs sans fil | la poêle antiadhésive | le tapis de yoga | la montre connectée | le jean slim |
        la couette 220x240 | l'aspirateur balai | la chaise de bureau"""),
    "orders": ["n° {}", "n°{}", "#{}", "CMD-{}", "numéro {}", "{}"],
    "joiners": ["Par ailleurs, ", "Autre chose : ", "Et en plus, ", "De plus, ", "Autre souci : ", "Aussi, "],
    "slang": [
        ("Bonjour,", "Bjr"),
        ("s'il vous plaît", "svp"),
        ("Merci d'avance.", "Merci d'avance !!"),
        ("beaucoup", "bcp"),
        ("quelque chose", "qqch"),
        ("Cordialement", "Cdt"),
    ],
    "urgent": [" svp", " C'est urgent.", " !!", " Merci de faire vite svp"],
    "core": {
        "livraison": P("""Ma commande {o} n'est toujours pas arrivée alors que le suivi indique « livré ». |
            Le colis de ma commande {o} est bloqué au centre de tri depuis une semaine. | Le livreur est passé hier mais n'a laissé aucun avis de passage. |
            Pouvez-vous me dire quand ma commande {o} sera expédiée ? |
            Le numéro de suivi que vous m'avez envoyé ne fonctionne pas sur le site du transporteur. | J'ai reçu un colis vide, le carton était ouvert. |
            Mon colis a été livré chez un voisin que je ne connais pas. | Est-ce possible de changer l'adresse de livraison de la commande {o} ? |
            La livraison express était promise en 24h, ça fait 4 jours que j'attends. | Le point relais indiqué est fermé, où puis-je récupérer mon colis ? |
            Il manque {p} dans le colis, seul un article sur deux est arrivé. | Le transporteur indique une adresse introuvable alors qu'elle est correcte. |
            Mon colis est marqué « retourné à l'expéditeur », je n'y comprends rien. | Quels sont les délais de livraison pour la Belgique ? |
            Est-ce que vous livrez en Corse et à quel tarif ? | Le suivi n'a pas bougé depuis l'expédition il y a dix jours. |
            Le livreur a laissé le paquet devant la porte sous la pluie. | Je ne serai pas chez moi jeudi, peut-on reporter la livraison ? |
            La date de livraison estimée a encore été repoussée. | J'ai reçu le colis de quelqu'un d'autre à la place du mien. |
            Le colis est arrivé écrasé, le carton était complètement abîmé. |
            Pourquoi ma commande {o} est-elle toujours « en préparation » après une semaine ? |
            Est-ce que je peux passer retirer mon colis directement à l'entrepôt ? |
            Le livreur dit qu'il est passé mais personne n'a sonné, j'étais pourtant chez moi. |
            Mon colis est parti en Colissimo alors que j'avais choisi Chronopost. | ça fait 3 semaines que j'attends mon colis, c'est inadmissible !! |
            Le suivi du colis affiche une anomalie d'acheminement. | Livraison en point relais possible pour {p} ?"""),
        "facturation": P("""Je n'ai pas reçu la facture de ma commande {o}. | J'ai été débité deux fois pour la même commande. |
            Pouvez-vous m'envoyer une facture avec la TVA détaillée pour ma société ? |
            Le montant prélevé ne correspond pas au total affiché au moment du paiement. |
            J'attends toujours le remboursement de mon retour, ça fait trois semaines. |
            Mon paiement par carte a été refusé mais l'argent a quand même été débité. | Le code promo n'a pas été appliqué sur ma facture. |
            Pourquoi les frais de port m'ont-ils été facturés alors que la livraison était gratuite ? |
            Je souhaite modifier le nom et l'adresse de facturation sur la facture {o}. | Est-il possible de payer en trois fois sans frais ? |
            Un prélèvement inconnu de 49,90 € apparaît sur mon relevé bancaire. |
            Le remboursement a été fait sur une ancienne carte bancaire qui n'existe plus. | Je voudrais un avoir plutôt qu'un remboursement. |
            Ma facture indique un prix différent de celui affiché sur le site. | Pouvez-vous me confirmer que mon virement a bien été reçu ? |
            J'ai été facturé pour {p} alors que j'avais annulé cet article. | Il me faut une facture acquittée pour ma note de frais. |
            L'abonnement premium a été renouvelé et prélevé sans mon accord. | Le remboursement partiel est incorrect, il manque 15 €. |
            Pouvez-vous annuler le prélèvement automatique mensuel ? | La TVA appliquée est de 20 % alors que ma société est hors UE. |
            Je ne trouve pas où télécharger mes factures. | Paiement PayPal effectué mais la commande {o} est marquée « en attente de paiement ». |
            Le bon d'achat de 10 € n'a pas été déduit du montant total. | Quand vais-je être remboursé de la commande {o} annulée ? |
            Votre facture contient une erreur sur le numéro SIRET. | On m'a débité 129 € au lieu de 99 €, merci de corriger. |
            Ma banque signale un paiement suspect à votre nom."""),
        "produit": P("""J'ai acheté {p} et l'article est défectueux dès le premier jour. |
            La taille ne correspond pas au guide des tailles, c'est beaucoup trop petit. |
            Concernant {p} : la couleur reçue n'est pas du tout celle de la photo. |
            La notice fournie est uniquement en anglais, avez-vous une version française ? |
            La qualité est vraiment décevante pour le prix, les coutures se défont déjà. | Est-ce que vous avez {p} en taille M ou en bleu ? |
            L'appareil chauffe anormalement et dégage une odeur de brûlé. | Il manque une pièce pour le montage, la vis n°4 n'est pas dans le sachet. |
            Quelle est la composition exacte du tissu ? Je suis allergique à la laine. | Est-ce que cet article est compatible avec les plaques à induction ? |
            L'écran de la montre connectée reste noir après la charge. | Le produit reçu ne correspond pas à la description de la fiche produit. |
            La garantie couvre-t-elle une panne au bout de 8 mois d'utilisation ? | J'aimerais échanger {p} contre une taille au-dessus. |
            Le produit est rayé et présente un défaut de fabrication. | Les dimensions réelles sont différentes de celles indiquées sur la fiche produit. |
            Après un seul lavage, le vêtement a rétréci et déteint. | Avez-vous des pièces détachées pour {p} ? | Quand aurez-vous de nouveau {p} en stock ? |
            La batterie des écouteurs ne tient même pas une heure. | Comment on règle le minuteur ? la notice est incompréhensible. |
            Les semelles se décollent déjà, c'est vraiment de la mauvaise qualité. | Je voudrais retourner {p} car la matière gratte énormément. |
            Est-ce que la taille 38 taille grand ou petit ? | Le mixeur fait un bruit anormal et s'arrête tout seul. |
            Concernant {p} : une des fonctions ne marche pas du tout. | Comment faire jouer la garantie constructeur sur {p} ? |
            le produit est nul, cassé au bout d'une semaine"""),
        "compte": P("""Je n'arrive plus à me connecter à mon compte client. | Je n'ai jamais reçu l'e-mail de réinitialisation du mot de passe. |
            Je souhaite supprimer mon compte et toutes mes données personnelles. | Comment changer l'adresse e-mail associée à mon compte ? |
            Mon compte a été bloqué après trop de tentatives de connexion. |
            Je pense que mon compte a été piraté, une commande que je n'ai pas passée apparaît. | Le lien de confirmation d'inscription a expiré. |
            Je voudrais me désabonner de la newsletter, je reçois trois e-mails par jour. |
            Impossible de créer un compte, le site dit que mon adresse e-mail est déjà utilisée. | Mes points de fidélité ont disparu de mon espace client. |
            Comment modifier mon numéro de téléphone dans mon profil ? | Le code de vérification par SMS n'arrive jamais. |
            J'ai deux comptes avec deux adresses e-mail différentes, pouvez-vous les fusionner ? |
            Je n'arrive pas à mettre à jour mon adresse postale dans mon espace client. |
            Mot de passe oublié, et la page de réinitialisation affiche une erreur 500. |
            Pouvez-vous m'envoyer une copie de mes données personnelles (RGPD) ? | L'application me déconnecte de mon compte toutes les cinq minutes. |
            Je voudrais changer mon identifiant de connexion. | Comment activer la double authentification sur mon compte ? |
            Je ne vois plus l'historique de mes commandes dans mon compte. | La connexion via Google ne fonctionne plus depuis la mise à jour. |
            Quelqu'un a changé le mot de passe de mon compte sans que je le demande. | Je voudrais fermer définitivement mon compte client. |
            Mon profil affiche le nom de quelqu'un d'autre. | Je ne reçois plus vos e-mails depuis que j'ai changé d'adresse e-mail. |
            impossible de me connecter, mot de passe incorrect alors que je suis sûr de moi | Mon compte est désactivé sans aucune explication. |
            Je souhaite modifier mes préférences de communication dans mon compte."""),
    },
    "detail": {
        "livraison": P("""Il me faut {p} avant samedi. | J'ai déjà appelé le transporteur, sans succès. | Merci de relancer le transporteur. |
            Pouvez-vous ouvrir une enquête auprès de La Poste ? | Je suis joignable au 06 12 34 56 78 pour le livreur. | C'était un cadeau d'anniversaire. |
            Le digicode est 4512B. | Pouvez-vous me renvoyer un colis ? | Mon code postal est bien le 69003. | Le numéro de suivi commence par 6A."""),
        "facturation": P("""Vous trouverez mon relevé bancaire en pièce jointe. | Le paiement a été fait par carte Visa. |
            Merci de procéder au remboursement au plus vite. | Ma comptable a besoin de la facture avant la fin du mois. | J'ai payé avec PayPal. |
            Le débit date du 12 du mois. | Je souhaite recevoir la facture au format PDF. | Sinon je ferai opposition auprès de ma banque. |
            Mon numéro de TVA intracommunautaire est FR12345678901."""),
        "produit": P("""Je joins des photos du défaut. | Je l'utilise conformément à la notice. | Je souhaite un échange contre un modèle neuf. |
            C'est le deuxième article défectueux que je reçois. | Je mesure 1m70 pour 65 kg. | Le numéro de série est inscrit sous l'appareil. |
            Je ne m'en suis servi que deux fois. | Avez-vous un tutoriel vidéo ? | J'ai conservé l'emballage d'origine."""),
        "compte": P("""Mon identifiant est {e}. | J'ai vérifié mes spams, rien. | J'ai essayé sur ordinateur et sur mobile. |
            J'ai vidé le cache du navigateur sans succès. | Merci de me répondre par e-mail plutôt que par téléphone. | Je me suis inscrite en 2019. |
            Je n'ai plus accès à mon ancienne adresse e-mail. | Mon navigateur est Firefox, à jour."""),
    },
    "generic": P("""Merci pour votre réponse rapide, tout est réglé. | Je suis cliente chez vous depuis des années. |
        Votre service client est injoignable par téléphone. | Super boutique, je recommande à tout le monde ! | Quels sont les horaires du service client ? |
        Avez-vous une boutique physique à Lyon ? | Je reviens vers vous suite à notre échange téléphonique d'hier. | Merci de me rappeler au plus vite. |
        Je n'ai toujours pas eu de réponse à mon précédent message. | C'est la troisième fois que je vous écris. | Tout est bien arrivé, merci beaucoup ! |
        Pouvez-vous transmettre ma demande au service concerné ? | Le chat en ligne ne répond jamais. | Est-ce que les soldes commencent bientôt ? |
        Vous faites des cartes cadeaux ? | J'ai laissé un avis cinq étoiles sur votre site. | Je voudrais parler à un responsable. |
        Merci pour le petit mot glissé dans le paquet, c'est adorable. | Proposez-vous des réductions étudiantes ? | Votre site est très lent aujourd'hui. |
        Je ne comprends pas votre dernière réponse, pouvez-vous préciser ? | Ok merci, je vais attendre encore quelques jours. |
        Parfait, le problème est résolu de mon côté. | Je suis très déçue par votre service. | Vous êtes au top, merci pour votre aide ! |
        Je vous remercie de votre patience. | Bonne continuation à toute l'équipe. | Vous vendez aussi des articles pour enfants ?"""),
}

EN = {
    "labels": ["shipping", "billing", "product", "account"],
    "greet": P(
        "Hi, | Hello, | Hi there, | Dear support team, | Good morning, | Hey, | To whom it may concern, | Hello again,"
    ),
    "close": P("""Thanks in advance. | Kind regards, {n}. | Best regards. | Thank you. | Looking forward to your reply. | Thanks! | Cheers, {n} |
        Please get back to me ASAP. | Many thanks for your help. | Regards, {n} | {n} |"""),
    "names": P("Emma | James | Priya Shah | Tom | Olivia | Daniel Kim | Sarah | Mohammed | Lucy | Mr. Collins"),
    "emails": P("emma.jones@gmail.com | jkhan88@outlook.com | t.wright@yahoo.co.uk | priya.s@icloud.com"),
    "products": P("""the waterproof jacket | the hand blender | the bedside lamp | the backpack | the espresso maker | the wool sweater | the summer dress |
        the Bluetooth speaker | the non-stick frying pan | the yoga mat | the smartwatch | the desk chair | the duvet | the cordless vacuum |
        the coffee grinder"""),
    "orders": ["#{}", "no. {}", "{}", "ORD-{}", "number {}"],
    "joiners": ["Also, ", "Another thing: "],
    "slang": [
        ("Hello,", "hi"),
        ("please", "pls"),
        ("Thanks in advance.", "thx in advance"),
        ("you", "u"),
        ("I'm", "im"),
    ],
    "urgent": [" pls", " This is urgent.", " !!", " Please hurry"],
    "core": {
        "shipping": P("""My order {o} still hasn't arrived and the tracking says delivered. |
            The tracking number you sent doesn't work on the courier's website. | My package has been stuck at the sorting facility for a week. |
            The courier left the parcel outside in the rain. | When will order {o} be shipped? | Can I change the delivery address for order {o}? |
            I paid for next-day delivery but it's been four days. | The parcel arrived crushed and the box was torn open. |
            Do you ship to Canada, and how long does delivery take? | The pickup point listed is closed, where can I collect my parcel? |
            The driver claims he attempted delivery but nobody rang the bell. | Only half of my order arrived, {p} is missing from the box. |
            My package was returned to sender and I have no idea why. | Tracking hasn't updated since it was dispatched ten days ago. |
            I received someone else's parcel instead of mine. | Could you reschedule the delivery? I won't be home on Thursday. |
            The estimated delivery date keeps getting pushed back. | The courier says my address can't be found, but it's correct. |
            Is express shipping available for {p}? | It's been three weeks and still no parcel, this is ridiculous!! |
            Order {o} has been 'processing' for a week, when does it ship? | The parcel was delivered to a neighbour I don't know. |
            Can I pick up my order from your warehouse instead? | Why did my order ship with a different carrier than the one I selected? |
            The box arrived empty, someone must have opened it in transit. | do u deliver on saturdays??"""),
        "billing": P("""I was charged twice for the same order. | I haven't received the invoice for order {o}. |
            Can you send me a VAT invoice for my company? | The amount charged doesn't match the total at checkout. |
            I'm still waiting for my refund, it's been three weeks. | My card was declined but the money was still taken. |
            The discount code wasn't applied to my payment. | Why was I charged shipping fees when delivery was supposed to be free? |
            I need to change the billing address on invoice {o}. | Can I pay in instalments? | There's an unknown charge of $49.90 on my bank statement. |
            The refund went to an old card that's been cancelled. | I'd prefer store credit instead of a refund. |
            My invoice shows a different price than the website. | Can you confirm you received my bank transfer? |
            I was billed for {p} even though I cancelled it. | My premium subscription renewed and charged me without my consent. |
            The partial refund is wrong, I'm missing $15. | Please cancel the monthly direct debit. | Sales tax was added even though I'm tax exempt. |
            Where can I download my invoices? | I paid with PayPal but order {o} says awaiting payment. | The $10 voucher wasn't deducted from the total. |
            When will I be refunded for cancelled order {o}? | You charged me $129 instead of $99, please fix it. |
            My bank flagged a suspicious payment from your store."""),
        "product": P("""I bought {p} and it's faulty, it won't turn on. | The size chart is wrong, the item is way too small. |
            The colour of {p} is nothing like the photo. | The instruction manual is missing from the box. |
            The quality is really poor for the price, the stitching is already coming apart. | Does {p} come in medium or in blue? |
            The device overheats and smells like burning plastic. | A part is missing for assembly, screw number 4 isn't in the bag. |
            What's the fabric made of? I'm allergic to wool. | Is this item compatible with induction hobs? |
            The smartwatch screen stays black after charging. | The item doesn't match the description on the product page. |
            Does the warranty cover a breakdown after eight months? | I'd like to exchange {p} for a bigger size. |
            The product arrived scratched with a manufacturing defect. | The actual dimensions are different from the product listing. |
            After one wash the garment shrank and the colour ran. | Do you sell spare parts for {p}? | When will {p} be back in stock? |
            The speaker battery barely lasts an hour. | How do I set the timer? the manual makes no sense. |
            The soles are already peeling off, really bad quality. | I want to return {p} because the material is itchy. | Does size 8 run large or small? |
            The blender makes a weird noise and stops by itself. | How do I make a claim under the manufacturer's warranty for {p}? |
            product is rubbish, broke after one week"""),
        "account": P("""I can't log in to my account anymore. | I never received the password reset email. |
            I want to delete my account and all my personal data. | How do I change the email address on my account? |
            My account was locked after too many login attempts. | I think my account was hacked, there's an order I didn't place. |
            The sign-up confirmation link has expired. | Please unsubscribe me from the newsletter, I get three emails a day. |
            I can't create an account, it says my email is already in use. | My loyalty points have disappeared from my account. |
            How can I update my phone number in my profile? | The SMS verification code never arrives. |
            I have two accounts with different emails, can you merge them? | I can't update my address in my account settings. |
            Forgot my password and the reset page shows error 500. | Can you send me a copy of my personal data under GDPR? |
            The app keeps logging me out every five minutes. | I'd like to change my username. | How do I turn on two-factor authentication? |
            My order history is no longer showing in my account. | Sign in with Google stopped working after the update. |
            Someone changed my account password without my request. | Please close my customer account permanently. | My profile shows someone else's name. |
            cant sign in, says wrong password but im sure its right | My account has been deactivated without any explanation."""),
    },
    "detail": {
        "shipping": P("""I need it before Saturday, it's a gift. | I've already called the courier twice. | Please open an investigation with the carrier. |
            My postcode is definitely correct. | The tracking number starts with 1Z. | The driver can call me on 07700 900123. |
            Could you send a replacement parcel? | The door code is 4512B."""),
        "billing": P("""I've attached my bank statement. | I paid by Visa. | Please process the refund as soon as possible. |
            My accountant needs the invoice by the end of the month. | I paid through PayPal. | The charge is dated the 12th. | A PDF invoice would be great. |
            Otherwise I'll have to dispute the charge with my bank."""),
        "product": P("""I've attached photos of the defect. | I used it exactly as the manual says. | I'd like a replacement unit. |
            This is the second faulty item I've received. | I usually wear a medium. | The serial number is on the bottom of the device. |
            I've only used it twice. | I kept the original packaging."""),
        "account": P("""My login email is {e}. | I've checked my spam folder, nothing. | I tried on both desktop and mobile. |
            I cleared my browser cache, no luck. | Please reply by email rather than phone. | I signed up back in 2019. |
            I no longer have access to my old email address. | I'm using the latest version of Chrome."""),
    },
    "generic": P("""Thanks for the quick reply, all sorted now. | I've been a customer for years. | Your phone line is always busy. |
        Great shop, I recommend it to everyone! | What are your customer service hours? | Do you have a physical store in Manchester? |
        Following up on our phone call yesterday. | Please call me back ASAP. | I still haven't had a reply to my last message. |
        This is the third time I'm writing to you. | Everything arrived fine, thank you so much! | Could you forward my request to the right team? |
        The live chat never answers. | When does the summer sale start? | Do you sell gift cards? | I left a five-star review on your website. |
        I'd like to speak to a manager. | Do you offer a student discount? | Your website is really slow today. |
        I don't understand your last reply, could you clarify? | OK thanks, I'll wait a few more days. | Perfect, the issue is fixed on my end. |
        Really disappointed with your service. | You're the best, thanks for your help!"""),
}


def fill(rng, s, L):
    for key, pool in (("{p}", "products"), ("{e}", "emails"), ("{n}", "names")):
        while key in s:
            s = s.replace(key, rng.choice(L[pool]), 1)
    while "{o}" in s:
        s = s.replace("{o}", rng.choice(L["orders"]).format(rng.randint(100000, 999999)), 1)
    return s


def lower_first(s):
    keep = s.startswith(("I ", "I'")) or len(s) < 2 or not (s[1].islower() or s[1] == "'")
    return s if keep else s[0].lower() + s[1:]


def informal(rng, text, L):
    r = rng.random()
    if r < 0.07:
        text = text.lower()
    elif r < 0.13 and text.endswith("."):
        text = text[:-1]
    elif r < 0.17 and text[-1] in ".!?":
        text += rng.choice(L["urgent"])
    for a, b in L["slang"]:
        if a in text and rng.random() < 0.2:
            text = text.replace(a, b, 1)
    return text


def message(rng, L, labels, detail_p=0.45):
    parts = [rng.choice(L["greet"])] if rng.random() < 0.75 else []
    for i, lab in enumerate(labels):
        core = fill(rng, rng.choice(L["core"][lab]), L)
        if i > 0:
            core = rng.choice(L["joiners"]) + lower_first(core)
        elif parts and rng.random() < 0.5:  # chat style "Bonjour, j'ai..." vs e-mail style "Bonjour, J'ai..."
            core = lower_first(core)
        parts.append(core)
        if rng.random() < (detail_p if len(labels) == 1 else 0.2):
            parts.append(fill(rng, rng.choice(L["detail"][lab]), L))
    if rng.random() < 0.7:
        parts.append(fill(rng, rng.choice(L["close"]), L))
    return informal(rng, " ".join(parts), L)


def build_train(rng, L, n_single, n_multi):
    labels = L["labels"]
    pairs = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :]]
    plan = [[labels[i % len(labels)]] for i in range(n_single)] + [list(pairs[i % len(pairs)]) for i in range(n_multi)]
    rows, seen = [], set()
    for labs in plan:
        order = rng.sample(labs, len(labs))  # topic order in the text varies; the label string stays canonical
        text = message(rng, L, order)
        while text in seen:
            text = message(rng, L, order)
        seen.add(text)
        rows.append((text, ";".join(labs)))
    rng.shuffle(rows)
    return rows


def build_corpus(rng, L, n, exclude):
    lines, seen = [], set(exclude)
    details = [d for lab in L["labels"] for d in L["detail"][lab]]
    while len(lines) < n:
        r = rng.random()
        if r < 0.55:  # a fresh labelled-style message (label dropped)
            text = message(rng, L, rng.sample(L["labels"], 1 if rng.random() < 0.8 else 2), detail_p=0.6)
        elif r < 0.8:  # generic shop / customer sentences
            parts = ([rng.choice(L["greet"])] if rng.random() < 0.5 else []) + rng.sample(
                L["generic"], rng.choice([1, 1, 2])
            )
            text = fill(rng, " ".join(parts + ([rng.choice(L["close"])] if rng.random() < 0.5 else [])), L)
        else:  # details only, without the core request
            parts = [rng.choice(L["greet"])] + rng.sample(details, rng.choice([1, 2]))
            text = fill(rng, " ".join(parts + [rng.choice(L["generic"]), rng.choice(L["close"])]), L)
        if text not in seen:
            seen.add(text)
            lines.append(text)
    return lines


def write(lang, L, seed, n_single, n_multi, n_corpus):
    rng = random.Random(seed)
    rows = build_train(rng, L, n_single, n_multi)
    lines = build_corpus(rng, L, n_corpus, [t for t, _ in rows])
    (HERE / lang / "corpus").mkdir(parents=True, exist_ok=True)
    with open(HERE / lang / "train.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["text", "labels"])
        w.writerows(rows)
    with open(HERE / lang / "corpus" / "messages.txt", "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    counts = Counter(lab for _, labs in rows for lab in labs.split(";"))
    multi = sum(";" in labs for _, labs in rows)
    print(f"[{lang}] train.csv: {len(rows)} rows, multi-label rows: {multi} ({100 * multi / len(rows):.1f}%)")
    print(f"[{lang}]   " + ", ".join(f"{lab}: {counts[lab]}" for lab in L["labels"]))
    print(f"[{lang}] corpus/messages.txt: {len(lines)} lines")


if __name__ == "__main__":
    write("fr", FR, SEED, n_single=275, n_multi=105, n_corpus=440)
    write("en", EN, SEED + 1, n_single=340, n_multi=0, n_corpus=330)
