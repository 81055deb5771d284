/* rlx-figure.c — a figure shown without a relayout (see the header) */
#include "rlx-config.h"
#include "rlx-figure.h"

GtkWidget *
rlx_figure_new (guint min_chars, guint nat_chars, float xalign)
{
  GtkWidget *figure = gtk_inscription_new (NULL);

  gtk_inscription_set_min_chars (GTK_INSCRIPTION (figure), min_chars);
  gtk_inscription_set_nat_chars (GTK_INSCRIPTION (figure), MAX (min_chars, nat_chars));
  gtk_inscription_set_xalign (GTK_INSCRIPTION (figure), xalign);
  gtk_inscription_set_text_overflow (GTK_INSCRIPTION (figure),
                                     GTK_INSCRIPTION_OVERFLOW_ELLIPSIZE_END);
  gtk_widget_add_css_class (figure, "numeric");
  return figure;
}

void
rlx_figure_set_text (GtkInscription *figure, const char *text)
{
  g_return_if_fail (GTK_IS_INSCRIPTION (figure));

  if (g_strcmp0 (gtk_inscription_get_text (figure), text) == 0)
    return;
  gtk_inscription_set_text (figure, text);
  gtk_accessible_update_property (GTK_ACCESSIBLE (figure), GTK_ACCESSIBLE_PROPERTY_LABEL,
                                  text ? text : "", -1);
}
